"""PostgreSQL for the end-to-end tests: a database of their own, or a server of their own.

`scratch_database` creates a database on the machine's PostgreSQL
(127.0.0.1:5432, or ``THREADMILL_TEST_PG``) and drops it afterwards.
`PostgresServer` runs a server of its own (initdb and pg_ctl from
``/usr/lib/postgresql/*/bin``) on a free loopback port in a temporary
directory, so a test can restart it without touching anything shared;
as root, the server runs as the ``postgres`` user. Missing pieces skip
the test, or fail it under ``CI=true``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import IN_CI, free_port


def missing(why: str) -> None:
    if IN_CI:
        pytest.fail(f"{why}; CI must run the end-to-end tests", pytrace=False)
    pytest.skip(why)


def psycopg_connect(dsn: str) -> object:
    try:
        import psycopg
    except ImportError:
        missing("psycopg is not installed (pip install 'psycopg[binary]')")
    try:
        return psycopg.connect(dsn, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        missing(f"PostgreSQL is not reachable at {dsn}: {exc}")
    raise AssertionError("unreachable")


@contextlib.contextmanager
def scratch_database(host: str, port: int, user: str = "postgres") -> Iterator[str]:
    """A new, empty database on the server at host:port; dropped afterwards."""
    name = f"threadmill_example_{uuid.uuid4().hex[:10]}"
    dsn = f"host={host} port={port} user={user} dbname=postgres"
    admin: Any = psycopg_connect(dsn)
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        admin = psycopg_connect(dsn)  # anew: the server may have restarted meanwhile
        with admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _binaries() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        missing("PostgreSQL's server binaries are not installed (Debian: postgresql)")
    return Path(found[-1]).parent


class PostgresServer:
    """A PostgreSQL server of the test's own, with trust auth on a free loopback port."""

    def __init__(self) -> None:
        self.bin = _binaries()
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="threadmill-pg-"))
        self.data = self.dir / "data"
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self._as:
            shutil.chown(self.dir, "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")
        self.start()

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run(
            [*self._as, str(self.bin / tool), *args],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def _ctl(self, action: str) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(self.dir / "server.log")
        self._run(
            "pg_ctl", action, "-D", str(self.data), "-w", "-m", "fast", "-o", options, "-l", log
        )

    def start(self) -> None:
        self._ctl("start")

    def restart(self) -> None:
        """Stop (fast: every session is cut) and start again on the same port."""
        self._ctl("restart")

    def close(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run("pg_ctl", "stop", "-D", str(self.data), "-m", "immediate", "-w")
        shutil.rmtree(self.dir, ignore_errors=True)
