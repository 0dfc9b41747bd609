"""examples/django_project end to end: real Redis, real PostgreSQL, real worker processes.

Each test gives the project a database of its own (created, then dropped)
and a Redis namespace of its own, runs its commands as a user would
(``manage.py migrate``, ``place_orders``, ``threadmill worker``) and reads
the outcome through threadmill's API and SQL.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RedisServer
from tests.django.servers import PostgresServer, psycopg_connect, scratch_database
from threadmill_core import Broker, TaskResultStatus, connect

pytestmark = [pytest.mark.redis, pytest.mark.slow]

PROJECT = Path(__file__).resolve().parents[2] / "examples" / "django_project"
TIMEOUT = 120
ACK_TIMEOUT = "threadmill_core.errors.AcknowledgementTimeout"


class Project:
    """The example project with its environment: a database, a Redis namespace."""

    def __init__(self, url: str, db_name: str, db_port: int) -> None:
        self.url = url
        self.dsn = f"host=127.0.0.1 port={db_port} user=postgres dbname={db_name}"
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "shop.settings",
            "THREADMILL_URL": url,
            "EXAMPLE_DB_NAME": db_name,
            "EXAMPLE_DB_PORT": str(db_port),
        }
        self.workers: list[subprocess.Popen[str]] = []
        self.logs = Path(tempfile.mkdtemp(prefix="threadmill-example-logs-"))

    def manage(self, *argv: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *argv],
            cwd=PROJECT, env=self.env, capture_output=True, text=True, timeout=TIMEOUT,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    def place_orders(self, count: int, *, first: int = 0, seconds: float = 0.0) -> list[str]:
        out = self.manage("place_orders", str(count), "--first", str(first),
                          "--seconds", str(seconds))  # fmt: skip
        return out.split()

    def worker(self, *flags: str) -> subprocess.Popen[str]:
        """`manage.py threadmill worker FLAGS`, in a process group of its own; logs to a file."""
        log = self.logs / f"worker-{len(self.workers)}.log"
        with log.open("w") as output:
            process = subprocess.Popen(
                [sys.executable, "manage.py", "threadmill", "worker", "--poll-interval", "0.2",
                 "--log-level", "WARNING", *flags],
                cwd=PROJECT, env=self.env, stdout=output, stderr=subprocess.STDOUT,
                text=True, start_new_session=True,
            )  # fmt: skip
        self.workers.append(process)
        return process

    def log(self, index: int) -> str:
        return (self.logs / f"worker-{index}.log").read_text()

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        connection: Any = psycopg_connect(self.dsn)
        with connection:
            return list(connection.execute(sql).fetchall())

    def stop(self) -> None:
        for process in self.workers:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        shutil.rmtree(self.logs, ignore_errors=True)


@pytest.fixture
def namespace_url(redis_server: RedisServer) -> str:
    return f"{redis_server.url}?namespace=example-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def broker(namespace_url: str) -> Iterator[Broker]:
    with connect(namespace_url) as made:
        yield made


@pytest.fixture
def shared_project(namespace_url: str) -> Iterator[Project]:
    """The project on a database of its own on the machine's PostgreSQL."""
    with scratch_database("127.0.0.1", 5432) as name:
        project = Project(namespace_url, name, 5432)
        project.manage("migrate", "--verbosity", "0")
        try:
            yield project
        finally:
            project.stop()


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        yield server
    finally:
        server.close()


def wait_until(condition: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def finished(broker: Broker, ids: list[str]) -> bool:
    return all(broker.get_result(task_id).is_finished for task_id in ids)


def test_a_worker_killed_mid_run_loses_no_task(shared_project: Project, broker: Broker) -> None:
    """SIGKILL to the whole worker mid-run: the next worker's reaper retries what was in flight.

    Twelve quick orders, then eight that take 3 s: once the quick ones are shipped, every
    task thread is in a slow one, and a second later each has been running long enough for
    its start to be recorded (`scheduler.MARK_DELAY`), so the kill finds started tasks to
    charge. (A task killed before its start is recorded is given back uncharged instead.)
    """
    ids = shared_project.place_orders(12, seconds=0.01)
    ids += shared_project.place_orders(8, first=12, seconds=3.0)
    first = shared_project.worker("--lease-ttl", "1.5")
    wait_until(lambda: shared_project.rows("SELECT count(*) FROM orders_shipment")[0][0] >= 12,
               "the worker to ship the quick orders")  # fmt: skip
    time.sleep(1.0)
    os.killpg(first.pid, signal.SIGKILL)  # the supervisor and its worker processes, at once
    first.wait(timeout=30)

    second = shared_project.worker("--lease-ttl", "1.5", "--burst")
    assert second.wait(timeout=TIMEOUT) == 0, shared_project.log(1)
    finals = [broker.get_result(task_id) for task_id in ids]
    assert {f.status for f in finals} == {TaskResultStatus.SUCCESSFUL}
    shipped = {
        order for (order,) in shared_project.rows('SELECT DISTINCT "order" FROM orders_shipment')
    }
    assert shipped == set(range(20))
    retried = [f for f in finals if any(e.exception_class_path == ACK_TIMEOUT for e in f.errors)]
    assert retried, "no task was in flight when the worker was killed"
    for final in retried:
        assert final.attempts >= 2
        assert final.return_value is not None


def test_a_worker_survives_a_database_restart(
    own_postgres: PostgresServer, namespace_url: str, broker: Broker
) -> None:
    """Between two tasks PostgreSQL restarts; the worker's next task runs at its first attempt."""
    with scratch_database("127.0.0.1", own_postgres.port) as name:
        project = Project(namespace_url, name, own_postgres.port)
        project.manage("migrate", "--verbosity", "0")
        try:
            worker = project.worker("--processes", "1", "--threads", "1")
            [before] = project.place_orders(1, first=0)
            wait_until(lambda: finished(broker, [before]), "the first task")
            own_postgres.restart()  # cuts the worker's open connection
            [after] = project.place_orders(1, first=1)
            wait_until(lambda: finished(broker, [after]), "the task after the restart")
            assert worker.poll() is None, project.log(0)
            result = broker.get_result(after)
            assert result.status is TaskResultStatus.SUCCESSFUL, result.errors
            assert result.attempts == 1
            rows = project.rows('SELECT "order", attempt FROM orders_shipment ORDER BY "order"')
            assert rows == [(0, 1), (1, 1)]
        finally:
            project.stop()
