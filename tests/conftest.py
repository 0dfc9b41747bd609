"""Shared fixtures: hypothesis profiles, a real redis-server, PostgreSQL, and the backend registry.

Every backend the suite knows is one entry of `BACKENDS`, carrying a marker,
so ``pytest -m "not redis and not postgres"`` runs without a server. Tests
that take the `harness_factory` fixture run once per backend.

A real redis-server is started by the session on a free loopback port. Where
``redis-server`` is not installed, real-Redis tests skip with the reason,
except in CI (``CI=true``), where that is a failure.

PostgreSQL tests use the server at ``THREADMILL_TEST_POSTGRES`` (a libpq URL
of a database to connect to first; by default the local server's
``postgres`` database as user ``postgres``). The session creates a database
of its own there and drops it at the end. Where no server answers, they skip
with the reason, except in CI, where that is a failure.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

from threadmill_core.clock import FakeClock
from threadmill_core.testing import Harness, HarnessFactory

if TYPE_CHECKING:
    from threadmill_memory import MemoryBackend

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

settings.register_profile(
    "dev",
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "ci",
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if IN_CI else "dev"))

#: Results are kept this long in every backend under test; the kit never
#: advances the clock past it.
RESULT_TTL = timedelta(days=7)


# --- a real redis-server -------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A redis-server process on a loopback port, owned by the test session."""

    def __init__(self, *extra_args: str) -> None:
        executable = shutil.which("redis-server")
        if executable is None:
            message = "redis-server is not installed (Debian: apt-get install redis-server)"
            if IN_CI:
                pytest.fail(f"{message}; CI must run the real-Redis tests")
            pytest.skip(message)
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="threadmill-redis-"))
        self.args = [
            executable,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.dir),
            "--daemonize", "no",
            *extra_args,
        ]  # fmt: skip
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            self.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        self.stop()
        pytest.fail(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One redis-server for the whole session (tests use separate namespaces)."""
    server = RedisServer()
    try:
        yield server
    finally:
        server.close()


# --- PostgreSQL ----------------------------------------------------------------------

#: Where the PostgreSQL tests connect to make their database.
POSTGRES_ADMIN_URL = os.environ.get(
    "THREADMILL_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def with_database(url: str, database: str) -> str:
    """`url` with its database replaced by `database` (and its query kept)."""
    from urllib.parse import urlsplit, urlunsplit

    return urlunsplit(urlsplit(url)._replace(path=f"/{database}"))


class PostgresDatabase:
    """A database of the session's own on a PostgreSQL server; dropped by `close`."""

    def __init__(self, admin_url: str) -> None:
        import psycopg

        self.admin_url = admin_url
        self.name = f"threadmill_test_{uuid.uuid4().hex[:12]}"
        try:
            with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
                conn.execute(f'CREATE DATABASE "{self.name}"')
        except psycopg.OperationalError as exc:
            message = (
                f"no PostgreSQL server at {admin_url} ({str(exc).strip()}); start one "
                "(Debian: pg_ctlcluster 15 main start) or set THREADMILL_TEST_POSTGRES"
            )
            if IN_CI:
                pytest.fail(f"{message}; CI must run the PostgreSQL tests")
            pytest.skip(message)
        self.url = with_database(admin_url, self.name)

    def close(self) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[PostgresDatabase]:
    """One database for the whole session (tests use separate namespaces in it)."""
    database = PostgresDatabase(POSTGRES_ADMIN_URL)
    try:
        yield database
    finally:
        database.close()


# --- the backend registry ------------------------------------------------------------


def memory_harness(backend_class: Callable[..., MemoryBackend] | None = None) -> Harness:
    """The memory backend on a fake clock, with its corruptions; `backend_class` a subclass
    of `MemoryBackend` to use instead (the kit's own tests break one on purpose)."""
    from threadmill_memory import MemoryBackend
    from threadmill_memory.testing import corruptions

    clock = FakeClock()
    backend = (backend_class or MemoryBackend)(clock=clock, result_ttl=RESULT_TTL)
    return Harness(
        backend=backend,
        advance=clock.advance,
        exact_clock=True,
        close=backend.close,
        result_ttl=RESULT_TTL,
        corruptions=corruptions(backend),
    )


def fakeredis_harness() -> Harness:
    import fakeredis

    from threadmill_redis.testing import make_harness

    return make_harness(fakeredis.FakeRedis(), result_ttl=RESULT_TTL)


def _real_redis_factory(request: pytest.FixtureRequest) -> HarnessFactory:
    import redis

    from threadmill_redis.testing import make_harness

    server: RedisServer = request.getfixturevalue("redis_server")
    client = redis.Redis.from_url(server.url)
    request.addfinalizer(client.close)
    return lambda: make_harness(client, result_ttl=RESULT_TTL)


def _postgres_factory(request: pytest.FixtureRequest) -> HarnessFactory:
    from threadmill_postgres.testing import make_harness

    database: PostgresDatabase = request.getfixturevalue("postgres_database")
    # The exact clock: the kit compares every timestamp, as on the memory backend.
    return lambda: make_harness(database.url, result_ttl=RESULT_TTL, exact=True)


BACKENDS: dict[str, Callable[[pytest.FixtureRequest], HarnessFactory]] = {
    "memory": lambda _request: memory_harness,
    "fakeredis": lambda _request: fakeredis_harness,
    "redis": _real_redis_factory,
    "postgres": _postgres_factory,
}


@pytest.fixture(params=[pytest.param(name, marks=getattr(pytest.mark, name)) for name in BACKENDS])
def harness_factory(request: pytest.FixtureRequest) -> HarnessFactory:
    """A factory of fresh harnesses, once per registered backend."""
    return BACKENDS[request.param](request)


@pytest.fixture
def harness(harness_factory: HarnessFactory) -> Iterator[Harness]:
    """One fresh, empty backend under test, closed afterwards."""
    built = harness_factory()
    try:
        yield built
    finally:
        built.close()
