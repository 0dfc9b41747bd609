"""Several OS processes on one database file: no task claimed twice, nothing lost to SIGKILL."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from threadmill_core import AcknowledgementTimeout, connect
from threadmill_core.models import TaskResult, TaskResultStatus
from threadmill_core.worker.maintenance import reap

import sqlite_tasks
from threadmill_sqlite.testing import ShiftedClockBackend, start_recorded

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="uses SIGKILL"),
]

HERE = Path(__file__).parent
#: Bounds on waiting for a child process; reached only when a test fails.
CHILD_TIMEOUT = 120.0
ACK_TIMEOUT = f"{AcknowledgementTimeout.__module__}.{AcknowledgementTimeout.__qualname__}"


def child_env() -> dict[str, str]:
    """The environment for a child: it imports exactly what this process imports."""
    paths = [entry for entry in sys.path if entry and Path(entry).is_dir()]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def spawn(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HERE / script), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[str]]]:
    """Child processes started by the test, killed if still running at the end."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for child in started:
        if child.poll() is None:
            child.kill()
        child.communicate()


def read_line(child: subprocess.Popen[str]) -> str:
    """The child's next stdout line; fails (with its stderr) if none comes or it exits."""
    assert child.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(child.stdout, selectors.EVENT_READ)
        if selector.select(CHILD_TIMEOUT):
            line = child.stdout.readline()
            if line:
                return line.strip()
    child.kill()
    _, err = child.communicate()
    pytest.fail(f"the child process said nothing on stdout; its stderr:\n{err}")


def run_claimers(
    url: str, count: int, children: list[subprocess.Popen[str]]
) -> dict[str, list[str]]:
    """Start `count` claimer processes at once; what each claimed, by name."""
    names = [f"claimer-{n}" for n in range(count)]
    started = [spawn("sqlite_claimer_main.py", url, name) for name in names]
    children.extend(started)
    for child in started:  # let them all go at once
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    claimed_by: dict[str, list[str]] = {}
    for name, child in zip(names, started, strict=True):
        out, err = child.communicate(timeout=CHILD_TIMEOUT)
        assert child.returncode == 0, err
        claimed_by[name] = json.loads(out)
    return claimed_by


def test_processes_creating_one_new_file_at_once_all_succeed(
    db_path: Path, children: list[subprocess.Popen[str]]
) -> None:
    """Processes that open a file nobody created yet, at the same moment, share one database."""
    claimed_by = run_claimers(f"sqlite://{db_path}", 6, children)
    assert claimed_by == {f"claimer-{n}": [] for n in range(6)}
    with connect(f"sqlite://{db_path}") as broker:
        assert broker.backend.counts() == {}


def test_processes_claiming_from_one_file_never_claim_a_task_twice(
    db_path: Path, children: list[subprocess.Popen[str]]
) -> None:
    """Four processes claiming at once from one file take every task exactly once."""
    url = f"sqlite://{db_path}"
    ids = [f"t{i:04}" for i in range(400)]
    with connect(url) as broker:
        broker.backend.enqueue(
            [
                TaskResult(
                    id=task_id,
                    task_path="app:work",
                    queue="high" if i % 3 == 0 else "default",
                    priority=i % 5,
                )
                for i, task_id in enumerate(ids)
            ]
        )
    claimed_by = run_claimers(url, 4, children)
    every = [task_id for claimed in claimed_by.values() for task_id in claimed]
    assert len(every) == len(set(every)), "a task was claimed twice"
    assert sorted(every) == ids
    with connect(url) as broker:
        for name, claimed in claimed_by.items():
            for task_id in claimed:
                record = broker.backend.get(task_id)
                assert record is not None
                assert (record.status, record.attempts) == (TaskResultStatus.SUCCESSFUL, 1)
                assert (record.worker_ids, record.return_value) == ((name,), name)


def test_a_worker_killed_mid_task_loses_nothing(
    db_path: Path, children: list[subprocess.Popen[str]]
) -> None:
    """A worker killed with SIGKILL mid-task, once the task's start is recorded, leaves the
    task to the reaper, which retries it; the task it had prefetched goes back uncharged."""
    url = f"sqlite://{db_path}"
    with connect(url) as broker:
        enqueued = sqlite_tasks.hang_on_first_attempt.using(broker=broker).enqueue("report")
        prefetched = sqlite_tasks.add.using(broker=broker).enqueue(1, 2)
        doomed = spawn("sqlite_worker_main.py", url, "doomed-worker", "run")
        children.append(doomed)
        assert read_line(doomed) == f"started {enqueued.id}"
        deadline = time.monotonic() + CHILD_TIMEOUT
        while not start_recorded(broker.backend, enqueued.id):  # type: ignore[arg-type]  # an SQLiteBackend
            assert time.monotonic() < deadline, "the worker never recorded the task's start"
            time.sleep(0.01)
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(CHILD_TIMEOUT)

    # The reaper's process sees time pass (the dead worker's lease of one hour
    # expire); the file itself is untouched.
    reaper = ShiftedClockBackend(db_path)
    try:
        running = reaper.get(enqueued.id)
        assert running is not None
        assert (running.status, running.attempts) == (TaskResultStatus.RUNNING, 1)
        assert reap(reaper) == 0  # the lease has not expired yet
        reaper.advance(timedelta(hours=1, minutes=1))
        assert reap(reaper) == 1
        retried = reaper.get(enqueued.id)
        back = reaper.get(prefetched.id)
    finally:
        reaper.close()
    assert back is not None
    assert (back.status, back.attempts, back.errors, back.worker_ids) == (
        TaskResultStatus.READY, 0, (), (),
    )  # fmt: skip
    assert retried is not None
    assert retried.status is TaskResultStatus.READY
    assert (retried.attempts, retried.worker_ids) == (1, ("doomed-worker",))
    assert [error.exception_class_path for error in retried.errors] == [ACK_TIMEOUT]
    assert (retried.args, retried.kwargs) == (enqueued.args, enqueued.kwargs)

    survivor = spawn("sqlite_worker_main.py", url, "survivor", "burst")
    children.append(survivor)
    _, err = survivor.communicate(timeout=CHILD_TIMEOUT)
    assert survivor.returncode == 0, err
    with connect(url) as broker:
        final = broker.backend.get(enqueued.id)
        added = broker.backend.get(prefetched.id)
    assert final is not None
    assert final.status is TaskResultStatus.SUCCESSFUL
    assert added is not None
    assert (added.status, added.attempts, added.return_value) == (TaskResultStatus.SUCCESSFUL, 1, 3)
    assert final.return_value == "report done on attempt 2"
    assert final.worker_ids == ("doomed-worker", "survivor")
    assert [error.exception_class_path for error in final.errors] == [ACK_TIMEOUT]


def test_the_threadmill_worker_command_drains_a_sqlite_queue(db_path: Path) -> None:
    """``threadmill worker --broker sqlite://...`` with several processes runs every task once."""
    url = f"sqlite://{db_path}"
    with connect(url) as broker:
        add = sqlite_tasks.add.using(broker=broker)
        enqueued = [add.enqueue(n, 1000) for n in range(60)]
    command = [sys.executable, "-m", "threadmill_core.cli", "worker", "sqlite_tasks"]
    options = ["--broker", url, "--processes", "3", "--threads", "2", "--burst"]
    finished = subprocess.run(
        [*command, *options, "--log-level", "WARNING"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
    )
    assert finished.returncode == 0, finished.stderr
    with connect(url) as broker:
        for n, record in enumerate(enqueued):
            final = broker.backend.get(record.id)
            assert final is not None
            assert (final.status, final.attempts) == (TaskResultStatus.SUCCESSFUL, 1)
            assert final.return_value == n + 1000
