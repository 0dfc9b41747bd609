"""The plugin and its URLs: schemes, options, libpq parameters, and what connecting refuses."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import timedelta

import pytest

from tests.conftest import PostgresDatabase, free_port, with_database
from threadmill_core import connect
from threadmill_core.errors import InvalidOption
from threadmill_core.plugins import installed_backends
from threadmill_postgres import PostgresBackend, PostgresUnavailable
from threadmill_postgres.options import PostgresOptions, check_namespace, redact, split_url
from threadmill_postgres.testing import drop_namespace, new_namespace

pytestmark = pytest.mark.postgres


def test_both_schemes_are_installed_through_the_entry_point() -> None:
    """`threadmill backends` lists postgresql:// and postgres://, served by the postgres plugin."""
    found = {b.scheme: b for b in installed_backends()}
    assert found["postgresql"].plugin == found["postgres"].plugin == "postgres"
    assert found["postgresql"].source.startswith("threadmill ")


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_connect_builds_a_backend_for_either_scheme(
    database: PostgresDatabase, scheme: str
) -> None:
    """connect() with either scheme stores and reads back on the URL's namespace."""
    namespace = new_namespace()
    url = database.url.replace("postgresql://", f"{scheme}://", 1) + f"?namespace={namespace}"
    broker = connect(url)
    try:
        backend = broker.backend
        assert isinstance(backend, PostgresBackend)
        assert backend.namespace == namespace
        assert backend.now().tzinfo is not None
    finally:
        drop_namespace(broker.backend)  # type: ignore[arg-type]


def test_options_come_from_the_query_or_keywords_and_libpq_gets_the_rest() -> None:
    """Our options are taken out of the query; libpq's stay, with threadmill's defaults added."""
    ours, libpq = split_url(
        "postgresql://app:s3cret@db.example:6432/jobs?namespace=emails&sslmode=disable"
        "&result_ttl=60&application_name=mine",
        {"pool_size": 3},
    )
    assert ours == {"namespace": "emails", "result_ttl": "60", "pool_size": 3}
    assert libpq.startswith("postgresql://app:s3cret@db.example:6432/jobs?")
    assert "sslmode=disable" in libpq
    assert "application_name=mine" in libpq, "the URL's own name is kept"
    assert "connect_timeout=10" in libpq, "a default is added where the URL says nothing"
    assert "namespace" not in libpq
    options = PostgresOptions.from_mapping(ours)
    assert (options.namespace, options.result_ttl, options.pool_size) == (
        "emails",
        timedelta(seconds=60),
        3,
    )


def test_a_url_without_a_host_keeps_its_three_slashes() -> None:
    """``postgresql:///db`` (the local socket) reaches libpq as it was written."""
    _ours, libpq = split_url("postgresql:///jobs?namespace=x", {})
    assert libpq.startswith("postgresql:///jobs?")


@pytest.mark.parametrize(
    ("url", "keywords", "match"),
    [
        ("postgresql://h/db?colour=blue", {}, "colour"),
        ("postgresql://h/db?namespace=a&namespace=b", {}, "twice"),
        ("postgresql://h/db?namespace=a", {"namespace": "b"}, "twice"),
        ("postgresql://h/db?result_ttl=soon", {}, "result_ttl"),
        ("postgresql://h/db?result_ttl=0", {}, "result_ttl"),
        ("postgresql://h/db?pool_size=0", {}, "pool_size"),
        ("postgresql://h/db", {"prune_batch": 1.5}, "prune_batch"),
        ("postgresql://h/db", {"shards": 3}, "shards"),
        ("postgresql://h/db#frag", {}, "fragment"),
        ("mysql://h/db", {}, "not a PostgreSQL URL"),
    ],
)
def test_a_bad_option_is_refused_naming_it(
    url: str, keywords: dict[str, object], match: str
) -> None:
    """An unknown or malformed option, or one given twice, is an InvalidOption naming it."""
    with pytest.raises(InvalidOption, match=match):
        PostgresBackend.from_url(url, **keywords)


@pytest.mark.parametrize(
    ("namespace", "match"),
    [
        ("", "non-empty"),
        ("pg_jobs", "pg_"),
        ("x" * 64, "63 bytes"),
        ("é" * 32, "63 bytes"),
        ("a\x00b", "NUL"),
        (7, "non-empty str"),
    ],
)
def test_a_namespace_that_cannot_name_a_schema_is_refused(namespace: object, match: str) -> None:
    """Empty, pg_-prefixed, over 63 bytes, or holding NUL: refused before connecting."""
    with pytest.raises(InvalidOption, match=match):
        check_namespace(namespace)


def test_a_password_never_shows() -> None:
    """The repr and the messages of a backend say *** for the URL's password."""
    assert redact("postgresql://app:s3cret@h/db") == "postgresql://app:***@h/db"
    with pytest.raises(InvalidOption) as refused:
        PostgresBackend.from_url("postgresql://app:s3cret@h/db?bogus=1")
    assert "s3cret" not in str(refused.value)


def test_a_database_that_does_not_exist_is_refused_when_connecting(
    database: PostgresDatabase,
) -> None:
    """Waiting will not make a missing database appear: connecting raises InvalidOption at once."""
    url = with_database(database.url, "no_such_database_here")
    started = time.monotonic()
    with pytest.raises(InvalidOption, match="does not exist"):
        PostgresBackend.from_url(url)
    assert time.monotonic() - started < 5


def test_a_server_that_cannot_be_reached_is_an_outage_not_an_error() -> None:
    """Connecting to a port nobody listens on succeeds; calls raise PostgresUnavailable."""
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres?pool_timeout=0.3"
    backend = PostgresBackend.from_url(url)
    try:
        with pytest.raises(PostgresUnavailable):
            backend.counts()
    finally:
        backend.close()


def test_the_command_line_reads_a_postgres_namespace(database: PostgresDatabase) -> None:
    """`threadmill stats --broker postgresql://...` shows the namespace's queues."""
    namespace = new_namespace()
    url = f"{database.url}?namespace={namespace}"
    broker = connect(url)
    try:
        from threadmill_core.ids import new_task_id
        from threadmill_core.models import TaskResult

        broker.backend.enqueue(
            [TaskResult(id=new_task_id(), task_path="app:work", queue="mail") for _ in range(3)]
        )
        run = subprocess.run(
            [sys.executable, "-m", "threadmill_core.cli", "stats", "--broker", url],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert run.returncode == 0, run.stderr
        line = next(line for line in run.stdout.splitlines() if line.startswith("mail"))
        assert line.split()[1] == "3", run.stdout
    finally:
        drop_namespace(broker.backend)  # type: ignore[arg-type]
