"""Live workers of real ``threadmill worker`` commands, on Redis and PostgreSQL.

Each command runs one worker process of one thread (no prefetch), so three
commands and three held tasks put one task on each.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PostgresDatabase, RedisServer
from tests.worker import live_worker_tasks
from threadmill_core import Broker, connect

MODULE = "tests.worker.live_worker_tasks"
ROOT = Path(__file__).resolve().parents[2]
#: The workers' --lease-ttl: an entry lapses this long after its worker's last heartbeat.
LEASE_TTL = 1.5


@pytest.fixture(
    params=[
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]
)
def url(request: pytest.FixtureRequest) -> str:
    namespace = f"live-{uuid.uuid4().hex[:10]}"
    if request.param == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        return f"{server.url}?namespace={namespace}"
    database: PostgresDatabase = request.getfixturevalue("postgres_database")
    return f"{database.url}?namespace={namespace}"


@pytest.fixture
def commands() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


def start(
    url: str, started: list[subprocess.Popen[str]], lease_ttl: float = LEASE_TTL
) -> subprocess.Popen[str]:
    """One ``threadmill worker`` command, in a process group of its own (as a shell starts it)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "threadmill_core.cli", "worker", MODULE, "--broker", url,
         "--queues", "live", "--processes", "1", "--threads", "1", "--prefetch", "0",
         "--lease-ttl", str(lease_ttl), "--poll-interval", "0.1", "--log-level", "WARNING"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )  # fmt: skip
    started.append(process)
    return process


def listed(url: str) -> list[dict[str, Any]]:
    """What ``threadmill workers --json`` prints, run as a user runs it."""
    ran = subprocess.run(
        [sys.executable, "-m", "threadmill_core.cli", "workers", "--json", "--broker", url],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    found: list[dict[str, Any]] = json.loads(ran.stdout)
    return found


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> float:
    """Seconds it took `condition` to hold; fails after `timeout`."""
    began = time.monotonic()
    while not condition():
        if time.monotonic() - began > timeout:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - began


def test_live_workers_list_running_tasks_and_go_when_killed_or_stopped(
    url: str, commands: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    """Three worker commands are listed with the task each runs; one SIGKILLed is gone within
    its lease TTL, and one stopped cleanly is gone the moment its command exits."""
    with connect(url) as broker:
        run(url, broker, commands, tmp_path)


def run(url: str, broker: Broker, commands: list[subprocess.Popen[str]], tmp_path: Path) -> None:
    hold = live_worker_tasks.hold.using(broker=broker)
    releases = {hold.enqueue(str(tmp_path / f"release-{n}")).id: tmp_path / f"release-{n}"
                for n in range(3)}  # fmt: skip
    for _ in range(3):
        start(url, commands)
    backend = broker.backend

    def each_runs_one() -> bool:
        found = backend.workers()
        return len(found) == 3 and all(len(info.running) == 1 for info in found)

    wait_until(each_runs_one, 60, "three workers, each running one task")
    shown = listed(url)
    assert len(shown) == 3
    assert {task["id"] for worker in shown for task in worker["running"]} == set(releases)
    for worker in shown:
        assert worker["host"] == socket.gethostname()
        assert (worker["queues"], worker["threads"]) == (["live"], 1)
        assert worker["running"][0]["task_path"] == "tests.worker.live_worker_tasks:hold"
        assert worker["last_seen"] is not None
    pids = {worker["pid"] for worker in shown}
    assert len(pids) == 3
    # Which command runs which worker process: a worker's pid is a child of its command.
    by_command = {}
    for process in commands:
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
        [mine] = [w for w in shown if str(w["pid"]) in children]
        by_command[process.pid] = mine

    killed, stopped, _ = commands
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait(timeout=10)
    killed_at = time.monotonic()
    killed_id = by_command[killed.pid]["id"]
    assert killed_id in {info.id for info in backend.workers()}, "listed until its entry lapses"
    wait_until(lambda: killed_id not in {w["id"] for w in listed(url)}, LEASE_TTL + 5, "the kill")
    # Its entry lapses at most LEASE_TTL after its last heartbeat, which came before the kill.
    assert time.monotonic() - killed_at < LEASE_TTL + 3

    stopped_id = by_command[stopped.pid]["id"]
    os.kill(stopped.pid, signal.SIGTERM)  # finish the running task, then exit
    releases[by_command[stopped.pid]["running"][0]["id"]].touch()
    assert stopped.wait(timeout=30) == 0, stopped.stdout.read() if stopped.stdout else ""
    now = {w["id"] for w in listed(url)}
    assert stopped_id not in now, "a stopped worker is gone at once"
    assert len(now) == 1
    for path in releases.values():
        path.touch()


def test_a_worker_process_killed_alone_is_forgotten_by_its_supervisor_at_once(
    url: str, commands: list[subprocess.Popen[str]]
) -> None:
    """A worker process SIGKILLed under a live supervisor is gone from the listing long before
    its entry would lapse, and the process started in its place is listed instead."""
    start(url, commands, lease_ttl=60)
    with connect(url) as broker:
        backend = broker.backend
        wait_until(lambda: len(backend.workers()) == 1, 60, "the worker to register")
        [first] = backend.workers()
        os.kill(first.pid, signal.SIGKILL)
        took = wait_until(lambda: first.id not in {w.id for w in backend.workers()}, 20, "it")
        assert took < 10, "forgotten by its supervisor, not lapsed (60 s)"
        wait_until(lambda: len(backend.workers()) == 1, 60, "the new worker process")
        [second] = backend.workers()
        assert second.pid != first.pid
