"""Cancelling a running task and reading its progress, in the in-process Worker."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from tests.core import stopped_tasks
from tests.faults.runs import wait_until
from threadmill_core import Broker, TaskResult, TaskResultStatus, Worker
from threadmill_core.models import Lease, Progress

RUNNING, SUCCESSFUL, CANCELLED = (
    TaskResultStatus.RUNNING,
    TaskResultStatus.SUCCESSFUL,
    TaskResultStatus.CANCELLED,
)
CANCEL_PATH = "threadmill_core.errors.TaskCancelled"
#: The lease TTL of these tests' workers: a heartbeat every 0.1 s.
LEASE_TTL = 0.3


@pytest.fixture(autouse=True)
def _fresh_events() -> Iterator[None]:
    with stopped_tasks.events_lock:
        stopped_tasks.events.clear()
    stopped_tasks.gate.clear()
    stopped_tasks.reported.clear()
    yield
    stopped_tasks.gate.set()


class Running:
    """A worker running in a thread of the test until `stop`."""

    def __init__(self, broker: Broker, **options: object) -> None:
        settings: dict[str, object] = {"threads": 2, "lease_ttl": LEASE_TTL, "poll_interval": 0.05}
        settings.update(options)
        self.worker = Worker(broker, **settings)  # type: ignore[arg-type]  # passed through
        self.thread = threading.Thread(target=self.worker.run, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.worker.stop()
        self.thread.join(10)
        assert not self.thread.is_alive()


def test_cancelling_a_running_task_stops_it_within_a_beat(broker: Broker) -> None:
    """A cancel of a RUNNING task is a request: the worker hears of it at its next heartbeat,
    raises TaskCancelled in the task (its finally runs, its context says so), and the task
    ends CANCELLED, never retried; the old lease's late acknowledgement is refused."""
    record = stopped_tasks.waits.using(broker=broker).enqueue()
    running = Running(broker)
    try:
        wait_until(lambda: stopped_tasks.seen("waits:start"), 10, "the task to start")
        lease = _lease_of(broker, record.id)
        requested = broker.cancel(record.id)
        asked = time.monotonic()
        assert requested is not None
        assert requested.status is RUNNING
        assert requested.cancel_requested_at is not None
        wait_until(lambda: broker.get_result(record.id).is_finished, 5, "the task to end")
        took = time.monotonic() - asked
    finally:
        running.stop()
    final = broker.get_result(record.id)
    assert final.status is CANCELLED
    assert final.errors[-1].exception_class_path == CANCEL_PATH
    assert final.cancel_requested_at == requested.cancel_requested_at
    assert took < LEASE_TTL / 3 + 1
    assert stopped_tasks.seen("waits:finally:True")
    late = broker.backend.complete(lease, _successful(lease.record))
    assert late is None
    assert broker.get_result(record.id).status is CANCELLED


def test_a_task_that_ends_first_keeps_its_outcome(broker: Broker) -> None:
    """Cancelling a finished task is refused with the reason; its outcome stands."""
    record = stopped_tasks.neighbour.using(broker=broker).enqueue(0)
    Worker(broker, lease_ttl=LEASE_TTL).run(burst=True)
    assert broker.cancel(record.id) is None
    assert broker.get_result(record.id).status is SUCCESSFUL


def test_progress_is_readable_while_the_task_runs_and_after(broker: Broker) -> None:
    """Progress a task reports is stored with the next heartbeat (the last value wins),
    readable from get_result while it runs, and its last report is kept after it ends."""
    record = stopped_tasks.progressing.using(broker=broker).enqueue(3)
    running = Running(broker)
    try:
        assert stopped_tasks.reported.wait(10)
        wait_until(
            lambda: broker.get_result(record.id).progress is not None, 5, "progress to be stored"
        )
        during = broker.get_result(record.id)
        assert during.status is RUNNING
        progress = during.progress
        assert progress is not None
        assert (progress.done, progress.total, progress.message) == (2, 3, "step 2")
        assert progress.updated_at is not None
        stopped_tasks.gate.set()
        wait_until(lambda: broker.get_result(record.id).is_finished, 5, "the task to end")
    finally:
        running.stop()
    final = broker.get_result(record.id)
    assert final.status is SUCCESSFUL
    assert final.progress is not None
    assert (final.progress.done, final.progress.message) == (3, "all done")


@pytest.mark.parametrize(
    ("done", "total", "message", "problem"),
    [
        (5, 3, None, "more than its total"),
        (-1, None, None, "done"),
        (True, None, None, "done"),
        ("half", None, None, "done"),
        (1, 0, None, "total"),
        (float("nan"), None, None, "done"),
        (1, 2, "x" * 1_000_000, "1,000,000 characters"),
        (1, 2, b"bytes", "message"),
    ],
)
def test_bad_progress_is_refused_at_the_call(
    broker: Broker, done: object, total: object, message: object, problem: str
) -> None:
    """context.progress refuses bad input at once, naming the problem; nothing is stored."""
    record = stopped_tasks.reports.using(broker=broker).enqueue(done, total, message)
    Worker(broker, lease_ttl=LEASE_TTL).run(burst=True)
    final = broker.get_result(record.id)
    assert final.status is SUCCESSFUL
    assert isinstance(final.return_value, str)
    assert final.return_value.startswith("InvalidOption: ")
    assert problem in final.return_value
    assert final.progress is None


def test_progress_is_a_checked_record() -> None:
    """A Progress is checked as it is made, as context.progress checks it."""
    assert Progress(done=1, total=2, message="half").total == 2
    with pytest.raises(ValueError, match="more than its total"):
        Progress(done=3, total=2)


def _lease_of(broker: Broker, task_id: str) -> Lease:
    """The current lease of a running task, as its holder has it (the token is the record's)."""
    tokens = stopped_tasks.tokens
    wait_until(lambda: task_id in tokens, 5, "the task's token")
    record = broker.get_result(task_id)
    deadline = broker.backend.now() + timedelta(seconds=30)
    return Lease(token=tokens[task_id], deadline=deadline, record=record)


def _successful(record: TaskResult) -> TaskResult:
    import attrs

    return attrs.evolve(record, status=SUCCESSFUL, return_value="late")
