"""Passwords never shown: reprs, error messages, command-line output and worker logs mask them."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import PostgresDatabase, free_port, with_database
from tests.faults.servers import Server
from threadmill_core import InvalidOption, connect
from threadmill_core.errors import BackendUnavailable, UnknownBackend
from threadmill_core.worker.settings import WorkerSettings

#: The console script pip installed beside this interpreter: what a user types.
THREADMILL = str(Path(sys.executable).with_name("threadmill"))

SECRET = "hunter2"


@pytest.fixture(scope="module")
def auth_redis() -> Iterator[Server]:
    """A redis-server whose default user's password is `SECRET`."""
    server = Server("--requirepass", SECRET)
    try:
        yield server
    finally:
        server.close()


def postgres_url(database: PostgresDatabase, *, password: str = SECRET) -> str:
    """The session database's URL with a password (the test server trusts 127.0.0.1)."""
    url = with_database(database.admin_url, database.name)
    return url.replace("postgres@", f"postgres:{password}@", 1) + "?namespace=credentials"


@pytest.mark.redis
def test_a_redis_broker_and_backend_repr_hide_the_password(auth_redis: Server) -> None:
    """repr(broker), str(broker) and repr(backend) of a Redis URL with a password hide it."""
    with connect(f"redis://:{SECRET}@127.0.0.1:{auth_redis.port}/0") as broker:
        shown = [repr(broker), str(broker), repr(broker.backend)]
    assert all(SECRET not in text for text in shown), shown
    assert shown[0] == f"Broker(redis://:***@127.0.0.1:{auth_redis.port}/0)"
    assert f"127.0.0.1:{auth_redis.port}/0" in shown[2]


@pytest.mark.postgres
def test_a_postgres_broker_and_backend_repr_hide_the_password(
    postgres_database: PostgresDatabase,
) -> None:
    """repr(broker), str(broker) and repr(PostgresBackend) of a URL with a password hide it."""
    with connect(postgres_url(postgres_database)) as broker:
        shown = [repr(broker), str(broker), repr(broker.backend)]
    assert all(SECRET not in text for text in shown), shown
    assert all("postgres:***@127.0.0.1" in text for text in shown), shown


@pytest.mark.postgres
def test_a_postgres_backend_from_a_conninfo_string_hides_its_password(
    postgres_database: PostgresDatabase,
) -> None:
    """A libpq ``key=value`` string's ``password=`` (quoted or not) is hidden in the repr."""
    from threadmill_postgres import PostgresBackend

    conninfo = (
        f"host=127.0.0.1 port=5432 user=postgres dbname={postgres_database.name} "
        f"password='{SECRET} x'"
    )
    backend = PostgresBackend(conninfo, namespace="credentials")
    try:
        shown = repr(backend)
    finally:
        backend.close()
    assert SECRET not in shown
    assert "password=***" in shown
    assert f"dbname={postgres_database.name}" in shown


def test_worker_settings_repr_hides_the_password() -> None:
    """A worker's settings, as a log or a traceback would show them, hide the password."""
    settings = WorkerSettings(broker_url=f"redis://:{SECRET}@h/0", modules=("m",))
    assert SECRET not in repr(settings)
    assert "redis://:***@h/0" in repr(settings)


def test_an_unknown_scheme_hides_the_password() -> None:
    """The error for a scheme nobody serves names the URL without its password."""
    with pytest.raises(UnknownBackend) as refused:
        connect(f"nosuch://:{SECRET}@h/0")
    assert SECRET not in str(refused.value)
    assert "nosuch://:***@h/0" in str(refused.value)


def test_a_conninfo_string_given_as_a_url_hides_the_password() -> None:
    """A libpq string passed where a URL belongs is refused without showing its password."""
    with pytest.raises(InvalidOption) as refused:
        connect(f"host=db password={SECRET}")
    assert SECRET not in str(refused.value)
    assert "password=***" in str(refused.value)


@pytest.mark.redis
def test_connection_errors_hide_the_password(auth_redis: Server) -> None:
    """Refused credentials and an unreachable server are reported without the password."""
    with pytest.raises(InvalidOption, match="credentials") as refused:
        connect(f"redis://:wrong-{SECRET}@127.0.0.1:{auth_redis.port}/0")
    assert SECRET not in str(refused.value)
    port = free_port()
    broker = connect(f"redis://:{SECRET}@127.0.0.1:{port}/0")
    with broker, pytest.raises(BackendUnavailable) as unavailable:
        broker.counts()
    assert SECRET not in str(unavailable.value)
    assert f"127.0.0.1:{port}" in str(unavailable.value)


@pytest.mark.postgres
def test_a_postgres_connection_error_hides_the_password(
    postgres_database: PostgresDatabase,
) -> None:
    """A database that does not exist is refused at connect without the URL's password."""
    url = postgres_url(postgres_database).replace(postgres_database.name, "no_such_database")
    with pytest.raises(InvalidOption) as refused:
        connect(url)
    assert "no_such_database" in str(refused.value)
    assert SECRET not in str(refused.value)


@pytest.mark.redis
def test_the_command_line_hides_a_bad_password(auth_redis: Server) -> None:
    """`threadmill stats` with a wrong password says the credentials were refused, not them."""
    ran = subprocess.run(
        [THREADMILL, "stats", "--broker",
         f"redis://:wrong-{SECRET}@127.0.0.1:{auth_redis.port}/0"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert ran.returncode == 2, ran
    assert "refused the credentials" in ran.stderr
    assert SECRET not in ran.stdout + ran.stderr


def run_worker(url: str, cwd: Path) -> str:
    """The output of a burst worker on `url`, run from `cwd` as a user runs it."""
    (cwd / "credential_tasks.py").write_text(
        "from threadmill_core import task\n\n@task\ndef f() -> None: ...\n"
    )
    ran = subprocess.run(
        [THREADMILL, "worker", "credential_tasks", "-p", "1", "--burst", "--broker", url],
        cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran
    return ran.stdout + ran.stderr


@pytest.mark.redis
def test_a_redis_worker_start_logs_hide_the_password(auth_redis: Server, tmp_path: Path) -> None:
    """A worker's start lines name its Redis backend with the password masked."""
    out = run_worker(f"redis://:{SECRET}@127.0.0.1:{auth_redis.port}/0", tmp_path)
    assert f"backend redis://:***@127.0.0.1:{auth_redis.port}/0" in out, out
    assert SECRET not in out


@pytest.mark.postgres
def test_a_postgres_worker_start_logs_hide_the_password(
    postgres_database: PostgresDatabase, tmp_path: Path
) -> None:
    """A worker's start lines name its PostgreSQL backend with the password masked."""
    out = run_worker(postgres_url(postgres_database), tmp_path)
    assert "backend postgresql://postgres:***@127.0.0.1" in out, out
    assert SECRET not in out
