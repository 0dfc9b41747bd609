"""Only attempts that ran are charged, with the default adaptive prefetch: `threadmill worker
--threads 1` (no ``--prefetch``), on real Redis and real PostgreSQL.

The worker drains 2,000 short tasks; its window grows past what a fixed
default (as many as its threads) would hold, and then it is stopped: by
one SIGTERM, after which every task it had claimed and not started is
READY again, unchanged, the moment it exits; or by a SIGKILL of its
process, after which every task that never started in it ends SUCCESSFUL
after one attempt, with no error (the supervisor gives the dead process's
leases back, uncharged, and its restarted process runs them). What the
kill reruns (tasks that had started in the dead process and start again in
another) is bounded by what the worker may hold: its thread plus the
window's ceiling (`prefetch_window.CEILING`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable

from tests.faults import fault_tasks
from tests.faults.runs import wait_until
from tests.faults.test_prefetch import finish, run_burst
from threadmill_core import Broker, TaskResult, TaskResultStatus
from threadmill_core.worker import prefetch_window

SUCCESSFUL = TaskResultStatus.SUCCESSFUL
READY = TaskResultStatus.READY
TOTAL = 2000
#: The most a one-thread worker with the adaptive prefetch holds at once.
HELD = 1 + prefetch_window.CEILING


def start_cli(broker_url: str, *options: str) -> subprocess.Popen[str]:
    """`threadmill worker` with its default prefetch, in a process group of its own."""
    return subprocess.Popen(
        [sys.executable, "-m", "threadmill_core.cli", "worker", fault_tasks.__name__,
         "--broker", broker_url, "--processes", "1", "--threads", "1", "--lease-ttl", "1",
         "--poll-interval", "0.1", "--log-level", "INFO", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )  # fmt: skip


def enqueue(broker: Broker, log_url: str, tag: str) -> list[TaskResult]:
    work = fault_tasks.work.using(broker=broker)
    return broker.enqueue_many(work, [((log_url, tag, n, 1), {}) for n in range(TOTAL)])


def prefetching(broker: Broker, read: Callable[[], list[str]]) -> int:
    """Wait until the worker holds more than a fixed default would (two, with one thread),
    while tasks are left; the pid of its process."""
    wait_until(
        lambda: (
            (counts := broker.counts().get("default")) is not None
            and counts.running > 4
            and counts.ready > 0
        ),
        60,
        "the adaptive prefetch to grow",
    )
    return int(read()[0].split(":")[2])


def started_in(events: list[str], pid: int) -> set[int]:
    starts = [e.split(":") for e in events if e.startswith("start:")]
    return {int(n) for _, n, started, _ in starts if int(started) == pid}


def started_elsewhere(events: list[str], pid: int) -> set[int]:
    starts = [e.split(":") for e in events if e.startswith("start:")]
    return {int(n) for _, n, started, _ in starts if int(started) != pid}


def test_a_sigterm_gives_every_unstarted_task_back_unchanged(
    broker: Broker,
    broker_url: str,
    log_url: str,
    namespace: str,
    read_events: Callable[[str], list[str]],
) -> None:
    """One SIGTERM mid-drain: the worker exits 0; a task it never started is READY with no
    attempt, error or worker; the others ran once; a later worker runs the rest once."""
    records = enqueue(broker, log_url, namespace)
    process = start_cli(broker_url)
    try:
        pid = prefetching(broker, lambda: read_events(namespace))
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output
    ran = started_in(read_events(namespace), pid)
    back = 0
    for n, record in enumerate(records):
        now = broker.get_result(record.id)
        if n in ran:
            assert (now.status, now.attempts, now.errors) == (SUCCESSFUL, 1, ()), now
        else:
            assert (now.status, now.attempts, now.errors, now.worker_ids) == (READY, 0, (), ())
            back += 1
    assert back > 0, "the stop came after the drain"

    run_burst(broker_url)
    finals = [broker.get_result(record.id) for record in records]
    assert {(f.status, f.attempts, f.errors) for f in finals} == {(SUCCESSFUL, 1, ())}


def test_a_sigkill_charges_no_task_that_had_not_started(
    broker: Broker,
    broker_url: str,
    log_url: str,
    namespace: str,
    read_events: Callable[[str], list[str]],
) -> None:
    """SIGKILL of the worker process mid-drain: the supervisor restarts it, and every task
    that had not started in the dead one (its prefetch among them) succeeds after one
    attempt with no error. The tasks run again are at most what the worker could hold
    (one thread plus the window's ceiling): the one running and those finished but not yet
    acknowledged (about 10 ms of them, `scheduler.ACK_DELAY`)."""
    records = enqueue(broker, log_url, namespace)
    process = start_cli(broker_url)
    try:
        pid = prefetching(broker, lambda: read_events(namespace))
        # Past a few windows at the ceiling, so the bound below is not met by running
        # fewer tasks than it allows.
        wait_until(
            lambda: len(started_in(read_events(namespace), pid)) >= 3 * HELD,
            60,
            f"{3 * HELD} tasks to start",
        )
        os.kill(pid, signal.SIGKILL)
        wait_until(
            lambda: all(broker.get_result(r.id).status is SUCCESSFUL for r in records),
            120,
            "every task to succeed",
        )
    finally:
        output = finish(process)
    assert process.returncode == 0, output
    events = read_events(namespace)
    ran = started_in(events, pid)
    assert len(ran) < TOTAL, "the kill came after the drain"
    rerun = ran & started_elsewhere(events, pid)
    assert len(rerun) <= HELD, sorted(rerun)
    for n, record in enumerate(records):
        if n not in ran:
            final = broker.get_result(record.id)
            assert (final.status, final.attempts, final.errors) == (SUCCESSFUL, 1, ()), final
