"""What the cancel tests check on every backend: a worker in a thread, and the checks."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import attrs

from tests.core import stopped_tasks
from tests.faults.runs import wait_until
from threadmill_core import Broker, TaskResult, TaskResultStatus, Worker
from threadmill_core.models import Lease

RUNNING, SUCCESSFUL, CANCELLED = (
    TaskResultStatus.RUNNING,
    TaskResultStatus.SUCCESSFUL,
    TaskResultStatus.CANCELLED,
)
CANCEL_PATH = "threadmill_core.errors.TaskCancelled"
#: The lease TTL of these tests' workers: a heartbeat every 0.1 s.
LEASE_TTL = 0.3


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


def check_cancel_of_a_running_task(broker: Broker) -> None:
    """Cancel a running `waits` on `broker`: CANCELLED within a beat, its finally ran, its
    context said so, and a late acknowledgement with its lease is refused."""
    stopped_tasks.gate.clear()
    with stopped_tasks.events_lock:
        stopped_tasks.events.clear()
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
    # The worker's lease, acknowledging success late: refused, or answered as a repeat of
    # the decision made with that token (the protocol's lost-reply rule); never applied.
    late = broker.backend.complete(lease, _successful(lease.record))
    assert late is None or late.status is CANCELLED
    after = broker.get_result(record.id)
    assert (after.status, after.return_value) == (CANCELLED, None)


def _lease_of(broker: Broker, task_id: str) -> Lease:
    """The current lease of a running task, as its holder has it (the token is the record's)."""
    tokens = stopped_tasks.tokens
    wait_until(lambda: task_id in tokens, 5, "the task's token")
    record = broker.get_result(task_id)
    deadline = broker.backend.now() + timedelta(seconds=30)
    return Lease(token=tokens[task_id], deadline=deadline, record=record)


def _successful(record: TaskResult) -> TaskResult:
    return attrs.evolve(record, status=SUCCESSFUL, return_value="late")
