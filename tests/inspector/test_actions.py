"""The inspector's actions under concurrency: fenced, explained, and never resurrecting a task.

The conformance kit proves each backend refuses a requeue or cancel of a task
in the wrong state (`requeue_of_a_running_task_is_refused`,
`requeue_of_a_successful_task_is_refused`, `cancel_of_a_running_task_is_refused`,
`requeue_and_cancel_end_the_repeat_window`). These tests show the command
line reports those refusals, and that an operator's requeue racing a reaper
or a late acknowledgement leaves the task where the protocol says.
"""

from __future__ import annotations

from datetime import timedelta

import attrs

from tests.inspector.conftest import Fleet, Threadmill, stored
from threadmill_core import (
    AcknowledgementTimeout,
    Broker,
    FakeClock,
    TaskError,
    TaskResult,
    TaskResultStatus,
)
from threadmill_core.cli import inspector
from threadmill_memory import MemoryBackend

READY = TaskResultStatus.READY
RUNNING = TaskResultStatus.RUNNING
FAILED = TaskResultStatus.FAILED
SUCCESSFUL = TaskResultStatus.SUCCESSFUL
LEASE = timedelta(seconds=30)
TIMEOUT = TaskError(
    exception_class_path=f"{AcknowledgementTimeout.__module__}.AcknowledgementTimeout",
    message="lease expired",
)


def test_requeue_while_the_reaper_holds_an_expired_lease_is_refused(
    fleet: Fleet, threadmill: Threadmill, broker: Broker, clock: FakeClock
) -> None:
    """A requeue racing a reaper is refused while it decides, and the reaper's decision stands."""
    clock.advance(timedelta(minutes=10))  # the running task's lease expired
    (reaped,) = broker.backend.claim_expired(limit=10, claim_ttl=LEASE)
    ran = threadmill("requeue", reaped.task_id)
    assert ran.code == 3
    assert "it is RUNNING" in ran.out
    failed = attrs.evolve(reaped.record, status=FAILED, errors=(TIMEOUT,))
    assert broker.backend.complete(reaped, failed) is not None
    assert stored(broker, reaped.task_id).status is FAILED


def test_a_late_acknowledgement_after_a_requeue_changes_nothing(
    fleet: Fleet, threadmill: Threadmill, broker: Broker, clock: FakeClock
) -> None:
    """Once the operator requeued a reaped task, the dead worker's late success is refused."""
    clock.advance(timedelta(minutes=10))
    (reaped,) = broker.backend.claim_expired(limit=10, claim_ttl=LEASE)
    broker.backend.complete(reaped, attrs.evolve(reaped.record, status=FAILED, errors=(TIMEOUT,)))
    assert threadmill("requeue", reaped.task_id).code == 0

    late = attrs.evolve(fleet.lease.record, status=SUCCESSFUL, return_value="late")
    assert broker.backend.complete(fleet.lease, late) is None
    assert broker.backend.complete(reaped, attrs.evolve(reaped.record, status=FAILED)) is None
    record = stored(broker, reaped.task_id)
    assert (record.status, record.return_value, record.errors) == (READY, None, (TIMEOUT,))


def test_a_requeue_after_the_worker_acknowledged_success_is_refused(
    fleet: Fleet, threadmill: Threadmill, broker: Broker
) -> None:
    """An operator who saw a task RUNNING cannot requeue it once its worker finished it."""
    done = attrs.evolve(fleet.lease.record, status=SUCCESSFUL, return_value="sent")
    assert broker.backend.complete(fleet.lease, done) is not None
    ran = threadmill("requeue", fleet.lease.task_id)
    assert ran.code == 3
    assert "it finished SUCCESSFUL" in ran.out
    assert stored(broker, fleet.lease.task_id).return_value == "sent"


class _Interfering(MemoryBackend):
    """A backend on which someone else acts on a task between a peek and the operator's action."""

    def __init__(self, clock: FakeClock, meddle: list[str]) -> None:
        super().__init__(clock=clock)
        self.meddle = meddle

    def peek(self, queue: str, status: TaskResultStatus, **kwargs: int) -> list[TaskResult]:
        page = super().peek(queue, status, **kwargs)
        while self.meddle:
            super().requeue(self.meddle.pop())  # another operator was quicker
        return page


def failed_tasks(backend: MemoryBackend, count: int, prefix: str = "t") -> list[str]:
    """Ids of `count` new tasks of queue q, claimed and finalized FAILED now."""
    ids = [f"{prefix}{n:03}" for n in range(count)]
    backend.enqueue([TaskResult(id=i, task_path="app:work", queue="q") for i in ids])
    for lease in backend.claim(["q"], worker="w", lease_ttl=LEASE, limit=count):
        backend.complete(lease, attrs.evolve(lease.record, status=FAILED))
    return ids


def test_requeue_failed_reports_a_task_that_changed_since_it_was_read() -> None:
    """A FAILED task requeued by someone else after the page was read is reported refused."""
    meddle: list[str] = []
    backend = _Interfering(FakeClock(), meddle)
    ids = failed_tasks(backend, 3)
    meddle.append(ids[1])
    report = inspector.requeue_failed(Broker(backend), "q")
    assert [o.task_id for o in report.done] == [ids[0], ids[2]]
    (refused,) = report.refused
    assert (refused.task_id, refused.status) == (ids[1], READY)
    assert refused.reason == "it is READY: already waiting to run"
    assert report.exit_code is inspector.ExitCode.PARTLY_DONE


class _FailingAtOnce(MemoryBackend):
    """A backend whose workers fail every requeued task again at once (time moving on)."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.clock = clock

    def requeue(self, task_id: str) -> TaskResult | None:
        stored = super().requeue(task_id)
        self.clock.advance(timedelta(milliseconds=1))
        for lease in self.claim(["q"], worker="fast", lease_ttl=LEASE, limit=10):
            self.complete(lease, attrs.evolve(lease.record, status=FAILED))
        return stored


def test_requeue_failed_requeues_each_task_once_even_if_it_fails_again_at_once() -> None:
    """Tasks failing again while requeue --failed runs are left alone, so it ends."""
    backend = _FailingAtOnce(FakeClock())
    ids = failed_tasks(backend, 250)
    report = inspector.requeue_failed(Broker(backend), "q", page_size=7)
    assert [o.task_id for o in report.done] == ids
    assert report.refused == []
    assert backend.counts()["q"].failed == 250
    assert {r.attempts for r in backend.peek("q", FAILED, limit=250)} == {2}


def test_requeue_failed_skips_poison_once_and_goes_on() -> None:
    """A FAILED record that does not decode is reported once, and the tasks after it requeued."""
    clock = FakeClock()
    backend = MemoryBackend(clock=clock)
    before = failed_tasks(backend, 3, prefix="a")
    backend._plant_raw("b-poison", b"not json", queue="q", status=FAILED)
    clock.advance(timedelta(seconds=1))
    after = failed_tasks(backend, 3, prefix="c")
    report = inspector.requeue_failed(Broker(backend), "q", page_size=2)
    assert [o.task_id for o in report.done] == before + after
    (refused,) = report.refused
    assert "b-poison" in refused.reason
    assert "purge its segment" in refused.reason
    assert backend.counts()["q"].failed == 1
