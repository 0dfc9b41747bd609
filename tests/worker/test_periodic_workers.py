"""Three `threadmill worker` processes schedule one every-second task, on real Redis and
PostgreSQL: each tick stored and run once, none missing, one worker killed; a pause holds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import redis

from tests.conftest import PostgresDatabase, RedisServer
from tests.worker import kept_schedule_tasks
from threadmill_core import TaskResultStatus, connect
from threadmill_core.periodic import unregister_schedule
from threadmill_core.worker.supervisor import Supervisor, WorkerSettings

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]

MODULE = "tests.worker.periodic_worker_tasks"
NAME = "beat-every-second"


@pytest.fixture(params=["redis", "postgres"])
def url(request: pytest.FixtureRequest, redis_server: RedisServer) -> str:
    namespace = f"periodic_{uuid.uuid4().hex[:10]}"
    if request.param == "redis":
        return f"{redis_server.url}?namespace={namespace}"
    database: PostgresDatabase = request.getfixturevalue("postgres_database")
    return f"{database.url}?namespace={namespace}"


@pytest.fixture
def events(redis_server: RedisServer) -> Iterator[tuple[dict[str, str], redis.Redis, str]]:
    tag = uuid.uuid4().hex
    client = redis.Redis.from_url(redis_server.url)
    env = {**os.environ, "THREADMILL_TEST_EVENTS": redis_server.url, "THREADMILL_TEST_TAG": tag}
    yield env, client, f"threadmill-test:{tag}"
    client.delete(f"threadmill-test:{tag}")
    client.close()


def start_worker(url: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "threadmill_core.cli", "worker", MODULE, "--broker", url,
         "--processes", "1", "--threads", "2", "--lease-ttl", "2", "--poll-interval", "0.2",
         "--log-level", "WARNING"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )  # fmt: skip


def test_three_workers_store_and_run_each_tick_once_and_a_pause_holds_for_all(
    url: str, events: tuple[dict[str, str], redis.Redis, str]
) -> None:
    """Ticks of an every-second schedule kept by three workers (one SIGKILLed half-way) are
    each stored once, under their tick id, with none missing, and each runs once (twice
    only if the kill caught its run); after `schedules pause` no worker stores another."""
    env, client, key = events
    workers = [start_worker(url, env) for _ in range(3)]
    try:
        time.sleep(6)
        os.killpg(workers[0].pid, signal.SIGKILL)  # the supervisor, its scheduler and its child
        workers[0].communicate(timeout=10)
        time.sleep(6)
        paused = subprocess.run(
            [sys.executable, "-m", "threadmill_core.cli", "schedules", "pause", NAME,
             "--broker", url],
            capture_output=True, text=True, env=env, timeout=60, check=False,
        )  # fmt: skip
        assert paused.returncode == 0, paused.stderr
        paused_at = datetime.now(UTC)
        time.sleep(4)
    finally:
        for worker in workers[1:]:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
        outputs = [worker.communicate(timeout=60)[0] for worker in workers[1:]]
    assert all(w.returncode == 0 for w in workers[1:]), outputs

    with connect(url) as broker:
        stored = []
        for status in TaskResultStatus:
            stored += broker.backend.peek("default", status, limit=1000)
    ticks = sorted(record.run_after for record in stored if record.run_after is not None)
    assert len(ticks) == len(stored)
    assert len(ticks) >= 15, ticks
    # None missing, none twice: one record per second from the first tick to the last.
    assert ticks == [ticks[0] + timedelta(seconds=n) for n in range(len(ticks))]
    # The pause held for both workers left (a tick due as it landed may be stored).
    assert ticks[-1] <= paused_at + timedelta(seconds=1)
    assert datetime.now(UTC) - ticks[-1] > timedelta(seconds=3)
    # Each tick's task ran once; a second run only where the kill caught the first.
    ran = Counter(int(event.decode().split(":")[0]) for event in client.lrange(key, 0, -1))
    finished = [r for r in stored if r.status is TaskResultStatus.SUCCESSFUL]
    assert len(finished) >= len(stored) - 2, [r.status for r in stored]
    for record in finished:
        at = int(record.run_after.timestamp() * 1000)  # type: ignore[union-attr]
        assert ran[at] == record.attempts, (record.id, ran[at], record.attempts)
        assert ran[at] == 1 or (record.attempts > 1 and record.errors), record


@pytest.mark.parametrize("flag", ["--no-schedules", "--burst"])
def test_a_worker_told_not_to_schedule_stores_no_tick(
    redis_server: RedisServer, events: tuple[dict[str, str], redis.Redis, str], flag: str
) -> None:
    """A worker with --no-schedules (or a --burst) stores no tick of its modules' schedules."""
    env, _client, _key = events
    url = f"{redis_server.url}?namespace=periodic_{uuid.uuid4().hex[:10]}"
    quiet = subprocess.Popen(
        [sys.executable, "-m", "threadmill_core.cli", "worker", MODULE, "--broker", url,
         "--processes", "1", "--poll-interval", "0.2", flag],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    try:
        time.sleep(3)
    finally:
        if quiet.poll() is None:
            quiet.send_signal(signal.SIGTERM)
        output = quiet.communicate(timeout=60)[0]
    assert quiet.returncode == 0, output  # it ran, and stopped (or finished its burst) cleanly
    with connect(url) as broker:
        counts = broker.backend.counts()
    stored = sum(c.pending + c.of(TaskResultStatus.SUCCESSFUL) for c in counts.values())
    assert stored == 0, output


def test_a_supervisor_schedules_the_schedules_its_settings_keep(redis_server: RedisServer) -> None:
    """`WorkerSettings.kept_schedules` picks which of the process's schedules the
    supervisor's scheduler keeps: ticks of the kept one are stored and run, none of the
    other's (threadmill_django gives each alias's worker its own this way)."""
    url = f"{redis_server.url}?namespace=periodic_{uuid.uuid4().hex[:10]}"
    kept_schedule_tasks.declare()
    settings = WorkerSettings(
        broker_url=url,
        modules=("tests.worker.kept_schedule_tasks",),
        queues=("default",),  # a tick of left-beat, if stored, would stay READY
        processes=1,
        poll_interval=timedelta(milliseconds=200),
        log_level="WARNING",
        kept_schedules=kept_schedule_tasks.only_kept,
    )
    supervisor = Supervisor(settings)
    codes: list[int] = []
    runner = threading.Thread(target=lambda: codes.append(supervisor.run()))
    runner.start()
    try:
        time.sleep(3)
    finally:
        supervisor.request_stop()
        runner.join(timeout=60)
        for name in ("kept-beat", "left-beat"):
            unregister_schedule(name)
    assert codes == [0]
    with connect(url) as broker:
        counts = broker.backend.counts()
    assert counts["default"].of(TaskResultStatus.SUCCESSFUL) >= 2, counts
    assert "left" not in counts or counts["left"].pending == 0, counts
