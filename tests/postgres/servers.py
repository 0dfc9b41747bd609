"""A PostgreSQL server of a test's own, to kill and restart: never the shared one.

`PostgresServer` runs ``initdb`` into a temporary folder and ``pg_ctl`` on a
free loopback port, with durable settings (``fsync``, ``synchronous_commit``
on, as shipped). PostgreSQL refuses to run as root, so as root the programs
run as the ``postgres`` user (``runuser``). Missing programs skip the test,
except in CI, where that is a failure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.conftest import IN_CI, free_port

#: Where Debian's PostgreSQL 15 keeps its programs; THREADMILL_PG_BIN overrides it.
PG_BIN = Path(os.environ.get("THREADMILL_PG_BIN", "/usr/lib/postgresql/15/bin"))


def _missing(message: str) -> None:
    if IN_CI:
        pytest.fail(f"{message}; CI must run the PostgreSQL fault tests")
    pytest.skip(message)


class PostgresServer:
    """One cluster in a temporary folder, on a free port; `close` stops it, deletes the folder."""

    def __init__(self) -> None:
        self.initdb, self.pg_ctl = PG_BIN / "initdb", PG_BIN / "pg_ctl"
        if not self.initdb.exists() or not self.pg_ctl.exists():
            _missing(f"PostgreSQL's initdb and pg_ctl are not in {PG_BIN} (set THREADMILL_PG_BIN)")
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            runuser = shutil.which("runuser")
            if runuser is None:
                _missing("running as root needs runuser to start PostgreSQL as its own user")
            self.as_user = [str(runuser), "-u", "postgres", "--"]
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="threadmill-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        if self.as_user:
            shutil.chown(self.dir, user="postgres", group="postgres")
        self._run(self.initdb, "-D", self.data, "-U", "postgres", "-A", "trust", "--no-sync")
        self.start()

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *command: object) -> None:
        done = subprocess.run(
            [*self.as_user, *map(str, command)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"{command[0]} failed: {done.stdout}{done.stderr}\n{log[-3000:]}")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1"
        self._run(self.pg_ctl, "-D", self.data, "-l", self.log, "-o", options, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: ``fast`` (a clean shutdown) or ``immediate`` (like a crash: no
        checkpoint, so the next start recovers from the WAL)."""
        self._run(self.pg_ctl, "-D", self.data, "-m", mode, "-w", "stop")

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):  # not running
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)
