"""Outages on PostgreSQL are reported once each way, and no driver noise reaches the log."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from tests.conftest import free_port
from tests.faults.runs import wait_until
from tests.postgres.servers import PostgresServer
from threadmill_core import Worker, connect

pytestmark = pytest.mark.postgres


@pytest.mark.parametrize("command", [["stats"], ["show", "some-task"]], ids=["stats", "show"])
def test_a_command_against_an_unreachable_server_fails_at_once_in_one_line(
    command: list[str],
) -> None:
    """`threadmill stats` on a port nobody serves: exit 2 within seconds, one line, host named."""
    port = free_port()
    url = f"postgresql://jobs:s3cret@127.0.0.1:{port}/app?namespace=emails"
    env = {k: v for k, v in os.environ.items() if k != "THREADMILL_URL"}
    started = time.monotonic()
    ran = subprocess.run(
        [sys.executable, "-m", "threadmill_core.cli", *command, "--broker", url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    took = time.monotonic() - started
    assert ran.returncode == 2, (ran.stdout, ran.stderr)
    assert took < 5, f"took {took:.1f} s"
    [line] = ran.stderr.splitlines()
    assert line.startswith("threadmill: PostgreSQL unavailable at database 'app' at 127.0.0.1:")
    assert f"127.0.0.1:{port}" in line
    assert "s3cret" not in line
    assert "jobs" not in line


@pytest.fixture
def own_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server for this test alone: it is stopped and started mid-run."""
    server = PostgresServer()
    try:
        yield server
    finally:
        server.close()


@pytest.mark.slow
def test_an_outage_is_one_warning_and_one_line_and_no_driver_noise(
    own_server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A server stopped for 4 s under an idle worker: one warning naming it, one line after."""
    caplog.set_level(logging.INFO)
    with connect(f"{own_server.url}?namespace=outage") as broker:
        worker = Worker(broker, poll_interval=0.2, lease_ttl=5)
        runner = threading.Thread(target=worker.run)
        runner.start()
        try:
            time.sleep(1)  # idle: waiting on LISTEN, its pool connected
            caplog.clear()
            own_server.stop("fast")
            time.sleep(4)
            own_server.start()
            wait_until(
                lambda: any("reachable again" in r.getMessage() for r in caplog.records),
                timeout=30,
                what="the worker to say the backend is back",
            )
            time.sleep(1)
        finally:
            worker.stop()
            runner.join(timeout=30)
    lines = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    assert [(name, level) for name, level, _ in lines] == [
        ("threadmill.worker", "WARNING"),
        ("threadmill.worker", "INFO"),
    ], lines
    warning = lines[0][2]
    where = f"database 'postgres' at 127.0.0.1:{own_server.port}"
    assert f"PostgreSQL unavailable at {where}" in warning
    assert "\n" not in warning
