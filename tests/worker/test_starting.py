"""How ``threadmill worker`` starts its worker processes: forked at first, spawned on restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.worker import import_tasks
from threadmill_core import Broker, TaskResult, TaskResultStatus

pytestmark = pytest.mark.redis


def worker_cli(broker_url: str, module: str, *options: str) -> list[str]:
    return [sys.executable, "-m", "threadmill_core.cli", "worker", module, "--broker",
            broker_url, "--threads", "1", "--poll-interval", "0.1", *options]  # fmt: skip


def burst(broker_url: str, module: str, *options: str) -> tuple[int, str, int]:
    """Run ``threadmill worker ... --burst`` to the end: exit code, output, the supervisor's pid."""
    process = subprocess.Popen(
        worker_cli(broker_url, module, "--burst", *options),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output, _ = process.communicate(timeout=120)
    return process.returncode, output, process.pid


def run_where(broker: Broker, count: int) -> list[TaskResult]:
    return [broker.enqueue(import_tasks.where) for _ in range(count)]


def test_the_first_worker_processes_are_forked_from_the_supervisor(
    broker: Broker, broker_url: str
) -> None:
    """Under the CLI, tasks run in child processes that did not import the task module again."""
    records = run_where(broker, 6)
    code, output, supervisor = burst(broker_url, "tests.worker.import_tasks", "--processes", "2")
    assert code == 0, output
    finals = [broker.get_result(r.id) for r in records]
    assert {f.status for f in finals} == {TaskResultStatus.SUCCESSFUL}, output
    assert {f.return_value[0] for f in finals} == {supervisor}
    assert supervisor not in {f.return_value[1] for f in finals}


def test_spawn_starts_every_worker_process_as_a_fresh_interpreter(
    broker: Broker, broker_url: str
) -> None:
    """With --spawn, each worker process imports the task module itself."""
    records = run_where(broker, 4)
    code, output, supervisor = burst(broker_url, "tests.worker.import_tasks", "--spawn")
    assert code == 0, output
    finals = [broker.get_result(r.id) for r in records]
    assert {f.status for f in finals} == {TaskResultStatus.SUCCESSFUL}, output
    assert all(f.return_value[0] == f.return_value[1] != supervisor for f in finals)


def test_a_module_that_starts_a_thread_makes_the_workers_spawned(
    broker: Broker, broker_url: str
) -> None:
    """A thread alive after the imports rules the fork out: the workers are spawned, and the
    log says why."""
    records = run_where(broker, 2)
    code, output, supervisor = burst(broker_url, "tests.worker.threaded_import_tasks")
    assert code == 0, output
    finals = [broker.get_result(r.id) for r in records]
    assert all(f.return_value[0] == f.return_value[1] != supervisor for f in finals), output
    assert "spawned, not forked" in output
    assert "started-by-import" in output


def test_a_killed_forked_worker_is_replaced_by_a_spawned_one(
    broker: Broker, broker_url: str
) -> None:
    """SIGKILL of a forked worker process: the supervisor starts a fresh one, which runs the
    next task; SIGTERM then stops everything with exit code 0."""
    process = subprocess.Popen(
        worker_cli(broker_url, "tests.worker.import_tasks", "--processes", "1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # so the cleanup below reaches the worker processes too
    )
    try:
        first = broker.wait(broker.enqueue(import_tasks.where).id, timeout=60)
        imported_in, forked = first.return_value
        assert imported_in == process.pid != forked
        os.kill(forked, signal.SIGKILL)
        second = broker.wait(broker.enqueue(import_tasks.where).id, timeout=60)
        imported_in, spawned = second.return_value
        assert spawned not in (forked, process.pid)
        assert imported_in == spawned
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    assert process.returncode == 0, output
    assert "worker 0 died (exit code -9); restarting" in output


def test_importing_threadmill_core_leaves_asyncio_unloaded() -> None:
    """``import threadmill_core`` (a producer, a worker of plain functions) loads no asyncio."""
    check = "import sys, threadmill_core; print(sorted({'asyncio'} & set(sys.modules)))"
    found = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "[]"


def test_a_sigterm_while_the_supervisor_starts_starts_no_worker_and_exits_at_once(
    broker_url: str, tmp_path: Path
) -> None:
    """SIGTERM to the whole process group (as systemd sends it) while the task modules are
    still importing: no worker process is started, so none waits out the shutdown timeout."""
    marker = tmp_path / "importing"
    process = subprocess.Popen(
        worker_cli(broker_url, "tests.worker.slow_import_tasks", "--processes", "2",
                   "--shutdown-timeout", "60"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "THREADMILL_TEST_IMPORTING": str(marker)},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert process.poll() is None, process.communicate()[0]
            assert time.monotonic() < deadline, "the import never began"
            time.sleep(0.02)
        os.killpg(process.pid, signal.SIGTERM)
        output, _ = process.communicate(timeout=30)  # the shutdown timeout is 60 s
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output
    assert "SIGTERM" in output
    assert "stopping: finishing running tasks" not in output, output  # no worker was there


def test_a_sigterm_to_the_process_group_is_one_graceful_stop(
    broker: Broker, broker_url: str
) -> None:
    """SIGTERM to the whole process group while a task runs reaches each worker process
    twice (directly, and from the supervisor): still one graceful stop. The task finishes
    and is acknowledged, once, and the exit code is 0, not EXIT_ABANDONED."""
    from tests.core import tasks as core_tasks

    process = subprocess.Popen(
        worker_cli(broker_url, "tests.core.tasks", "--processes", "2",
                   "--shutdown-timeout", "60"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        broker.wait(broker.enqueue(core_tasks.echo, 1).id, timeout=60)  # the workers are up
        record = broker.enqueue(core_tasks.nap, 1.5)
        deadline = time.monotonic() + 30
        while broker.get_result(record.id).status is not TaskResultStatus.RUNNING:
            assert time.monotonic() < deadline, "the task never started"
            time.sleep(0.01)
        time.sleep(0.2)  # let it run, so the stop comes while it does
        os.killpg(process.pid, signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    assert process.returncode == 0, output
    final = broker.get_result(record.id)
    assert (final.status, final.attempts, final.errors) == (TaskResultStatus.SUCCESSFUL, 1, ())
    assert "abandoned" not in output, output
