"""Only attempts that ran are charged: `threadmill worker --threads 1 --prefetch 8`, on real
Redis and real PostgreSQL.

The worker claims nine tasks at once: one that blocks on its first attempt
(`fault_tasks.hold`, retried once) and eight quick ones it prefetches
behind it. Whatever stops it while the first runs (a SIGKILL of its
process, a second SIGTERM, the shutdown timeout), the running task alone
meets its retry policy (an `AcknowledgementTimeout`, then its second
attempt), and the eight end SUCCESSFUL after one attempt, with no error,
having run once. Each test waits until the running task's start is
recorded before it strikes (each backend's `testing.start_recorded`): a
task killed before that goes back uncharged too, which is the other rule,
and the last tests: a task that kills its own worker at once is given back
once, then has its start recorded before it runs, and is charged; the
innocent tasks claimed beside it never are.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable

import pytest

from tests.faults import fault_tasks
from tests.faults.runs import start_recorded, wait_until
from threadmill_core import Broker, TaskResult, TaskResultStatus
from threadmill_core.worker.supervisor import EXIT_ABANDONED

SUCCESSFUL = TaskResultStatus.SUCCESSFUL
READY = TaskResultStatus.READY
ACK_TIMEOUT = "threadmill_core.errors.AcknowledgementTimeout"
WORKER = ("--processes", "1", "--threads", "1", "--prefetch", "8", "--lease-ttl", "1",
          "--poll-interval", "0.1", "--log-level", "INFO")  # fmt: skip


def start_cli(broker_url: str, *options: str) -> subprocess.Popen[str]:
    """`threadmill worker` as a user starts it, in a process group of its own."""
    return subprocess.Popen(
        [sys.executable, "-m", "threadmill_core.cli", "worker", fault_tasks.__name__,
         "--broker", broker_url, *WORKER, *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )  # fmt: skip


def run_burst(broker_url: str) -> None:
    """A later `threadmill worker --burst`, to the end: the reaper charges the abandoned task."""
    again = start_cli(broker_url, "--burst")
    try:
        output, _ = again.communicate(timeout=120)
    finally:
        if again.poll() is None:
            again.kill()
    assert again.returncode == 0, output


def enqueue(broker: Broker, log_url: str, tag: str) -> tuple[TaskResult, list[TaskResult]]:
    """The blocking task, then eight quick ones behind it in READY."""
    first = fault_tasks.hold.using(broker=broker).enqueue(log_url, tag, 0)
    quick = fault_tasks.work.using(broker=broker)
    rest = broker.enqueue_many(quick, [((log_url, tag, n, 0), {}) for n in range(1, 9)])
    return first, rest


def first_start(read: Callable[[], list[str]], broker: Broker, first: TaskResult) -> int:
    """Wait until the first task runs with its start recorded; the pid of its worker."""
    wait_until(lambda: any(e.startswith("start:0:") for e in read()), 60, "the first task to run")
    wait_until(lambda: start_recorded(broker, first.id), 30, "its start to be recorded")
    [event] = [e for e in read() if e.startswith("start:0:")]
    return int(event.split(":")[2])


def assert_exact_outcome(
    broker: Broker, first: TaskResult, rest: list[TaskResult], events: list[str], stopped: int
) -> None:
    """The running task alone was charged; the eight ran once, elsewhere, uncharged."""
    final = broker.get_result(first.id)
    assert (final.status, final.attempts, final.return_value) == (SUCCESSFUL, 2, 0)
    assert [e.exception_class_path for e in final.errors] == [ACK_TIMEOUT]
    for record in rest:
        done = broker.get_result(record.id)
        assert (done.status, done.attempts, done.errors) == (SUCCESSFUL, 1, ()), done
        assert len(done.worker_ids) == 1
    starts = [e.split(":") for e in events if e.startswith("start:")]
    assert Counter(int(n) for _, n, _pid, _attempt in starts) == {
        0: 2,
        **dict.fromkeys(range(1, 9), 1),
    }
    assert not [n for _, n, pid, _ in starts if int(pid) == stopped and n != "0"], (
        "a prefetched task ran in the worker that was stopped"
    )


def finish(process: subprocess.Popen[str]) -> str:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    return output


def test_a_sigkill_during_the_first_task_charges_it_alone(
    broker: Broker,
    broker_url: str,
    log_url: str,
    namespace: str,
    read_events: Callable[[str], list[str]],
) -> None:
    """SIGKILL of the worker process: the reaper charges the running task (retried once, then
    SUCCESSFUL); the eight it prefetched go back uncharged and run once, in the new process."""
    first, rest = enqueue(broker, log_url, namespace)
    process = start_cli(broker_url)
    try:
        pid = first_start(lambda: read_events(namespace), broker, first)
        assert [broker.get_result(r.id).status for r in rest] == [TaskResultStatus.RUNNING] * 8
        os.kill(pid, signal.SIGKILL)  # the supervisor restarts it; its reaper decides
        wait_until(
            lambda: all(broker.get_result(r.id).status is SUCCESSFUL for r in [first, *rest]),
            60,
            "every task to succeed",
        )
    finally:
        output = finish(process)
    assert process.returncode == 0, output
    assert_exact_outcome(broker, first, rest, read_events(namespace), pid)


def test_a_second_sigterm_gives_the_prefetch_back_at_once_and_abandons_the_running_task(
    broker: Broker,
    broker_url: str,
    log_url: str,
    namespace: str,
    read_events: Callable[[str], list[str]],
) -> None:
    """SIGTERM twice: the eight are READY again the moment the worker exits, uncharged; the
    running task is abandoned, logged, and the exit code says so; a later worker charges it."""
    first, rest = enqueue(broker, log_url, namespace)
    process = start_cli(broker_url)
    try:
        pid = first_start(lambda: read_events(namespace), broker, first)
        process.send_signal(signal.SIGTERM)
        time.sleep(0.3)  # let the first signal land before the second (two at once are one)
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == EXIT_ABANDONED, output
    for record in rest:
        back = broker.get_result(record.id)
        assert (back.status, back.attempts, back.errors, back.worker_ids) == (READY, 0, (), ())
    assert broker.get_result(first.id).status is TaskResultStatus.RUNNING
    [line] = [line for line in output.splitlines() if "abandoned" in line and first.id in line]
    assert "its retry policy decides" in line

    run_burst(broker_url)
    assert_exact_outcome(broker, first, rest, read_events(namespace), pid)


def test_the_shutdown_timeout_abandons_the_running_task_and_exits_non_zero(
    broker: Broker,
    broker_url: str,
    log_url: str,
    namespace: str,
    read_events: Callable[[str], list[str]],
) -> None:
    """One SIGTERM and a task still running at --shutdown-timeout: the eight went back at the
    signal, the running task is abandoned and logged, and the exit code is EXIT_ABANDONED."""
    first, rest = enqueue(broker, log_url, namespace)
    process = start_cli(broker_url, "--shutdown-timeout", "1")
    try:
        pid = first_start(lambda: read_events(namespace), broker, first)
        process.send_signal(signal.SIGTERM)
        wait_until(
            lambda: all(broker.get_result(r.id).status is READY for r in rest),
            30,
            "the prefetch to go back at the first signal",
        )
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == EXIT_ABANDONED, output
    assert "will be retried" not in output
    [line] = [line for line in output.splitlines() if "abandoned" in line and first.id in line]
    assert "its retry policy decides" in line

    run_burst(broker_url)
    assert_exact_outcome(broker, first, rest, read_events(namespace), pid)


@pytest.mark.slow
def test_a_task_that_kills_its_worker_before_its_start_is_recorded_is_charged_at_its_next_run(
    broker: Broker,
    broker_url: str,
    log_url: str,
    namespace: str,
    read_events: Callable[[str], list[str]],
) -> None:
    """A task that SIGKILLs its worker at once is not marked: it goes back uncharged once, then
    its next claim records its start before it runs, and that kill is charged (no_retry:
    FAILED)."""
    record = fault_tasks.kills_its_worker.using(broker=broker).enqueue(log_url, namespace)
    process = start_cli(broker_url)
    try:
        wait_until(
            lambda: broker.get_result(record.id).status is TaskResultStatus.FAILED,
            120,
            "the poison to be charged",
        )
    finally:
        output = finish(process)
    final = broker.get_result(record.id)
    assert (final.attempts, [e.exception_class_path for e in final.errors]) == (1, [ACK_TIMEOUT])
    runs = [e for e in read_events(namespace) if e.startswith("start:0:")]
    assert len(runs) == 2, (runs, output)
    assert [int(e.split(":")[3]) for e in runs] == [1] * len(runs), "each run was attempt 1"


def test_the_tasks_claimed_beside_a_task_that_kills_its_worker_are_never_charged(
    broker: Broker,
    broker_url: str,
    log_url: str,
    namespace: str,
    read_events: Callable[[str], list[str]],
) -> None:
    """A task that SIGKILLs its worker before its start is recorded, among 40 innocent tasks,
    prefetch 8: every innocent ends SUCCESSFUL after one attempt with no error; the killer
    alone is charged (no_retry), FAILED after one free give-back."""
    echo = fault_tasks.echo.using(broker=broker)
    before = broker.enqueue_many(echo, [((n,), {}) for n in range(20)])
    killer = fault_tasks.kills_its_worker.using(broker=broker).enqueue(log_url, namespace)
    after = broker.enqueue_many(echo, [((n,), {}) for n in range(20, 40)])
    innocents = [*before, *after]
    process = start_cli(broker_url)
    try:
        wait_until(
            lambda: (
                broker.get_result(killer.id).status is TaskResultStatus.FAILED
                and all(broker.get_result(r.id).status is SUCCESSFUL for r in innocents)
            ),
            120,
            "the killer to be charged and every innocent task to succeed",
        )
    finally:
        output = finish(process)
    for record in innocents:
        done = broker.get_result(record.id)
        assert (done.status, done.attempts, done.errors) == (SUCCESSFUL, 1, ()), (done, output)
    final = broker.get_result(killer.id)
    assert (final.attempts, [e.exception_class_path for e in final.errors]) == (1, [ACK_TIMEOUT])
    runs = [e for e in read_events(namespace) if e.startswith("start:0:")]
    assert len(runs) == 2, (runs, output)
