"""Cancel requests and progress, checked on any backend's `Harness` (Redis and PostgreSQL
tests call these with their own harnesses, and add their own corruptions)."""

from __future__ import annotations

from datetime import timedelta

import attrs

from threadmill_core.models import Progress, TaskResult, TaskResultStatus
from threadmill_core.testing import Harness

LEASE = timedelta(minutes=5)
RUNNING, CANCELLED = TaskResultStatus.RUNNING, TaskResultStatus.CANCELLED


def one_task(task_id: str = "t1") -> TaskResult:
    return TaskResult(id=task_id, task_path="tests.tasks:noop")


def check_request_cancel_on_running(harness: Harness) -> None:
    """Stored on a RUNNING task (the first request wins), refused on READY and unknown ids;
    the next renewal says so, and a CANCELLED completion keeps the request and progress."""
    backend = harness.backend
    backend.enqueue([one_task("t1"), one_task("t2")])
    assert backend.request_cancel("t1") is None  # READY: cancel it instead
    assert backend.request_cancel("nope") is None
    [lease] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    renewed = backend.extend(lease, LEASE)
    assert renewed is not None
    assert not renewed.cancel_requested
    first = backend.request_cancel(lease.task_id)
    assert first is not None
    assert first.status is RUNNING
    assert first.cancel_requested_at is not None
    again = backend.request_cancel(lease.task_id)
    assert again is not None
    assert again.cancel_requested_at == first.cancel_requested_at
    [renewed_many] = backend.extend_many([lease], LEASE)
    assert renewed_many is not None
    assert renewed_many.cancel_requested
    assert backend.record_progress([(lease, Progress(done=3, total=4, message="hi"))]) == [True]
    done = backend.complete(lease, attrs.evolve(lease.record, status=CANCELLED))
    assert done is not None
    assert done.status is CANCELLED
    assert done.finished_at is not None
    assert done.cancel_requested_at == first.cancel_requested_at
    assert done.progress is not None
    assert done.progress.done == 3
    assert backend.get(lease.task_id) == done
    assert backend.complete(lease, attrs.evolve(lease.record, status=CANCELLED)) == done
    assert backend.request_cancel(lease.task_id) is None  # finished


def check_progress_is_fenced(harness: Harness) -> None:
    """Stored, stamped, under the current token while RUNNING; refused otherwise; of a task
    given twice, the last value is kept; kept after the task finishes."""
    backend = harness.backend
    backend.enqueue([one_task("t1")])
    [lease] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    stale = attrs.evolve(lease, token=lease.token + "x")
    answers = backend.record_progress(
        [(lease, Progress(done=1)), (stale, Progress(done=9)), (lease, Progress(done=2.5))]
    )
    assert answers == [True, False, True]
    stored = backend.get("t1")
    assert stored is not None
    assert stored.progress is not None
    assert stored.progress.done == 2.5
    assert stored.progress.updated_at is not None
    finished = backend.complete(
        lease, attrs.evolve(lease.record, status=TaskResultStatus.SUCCESSFUL)
    )
    assert finished is not None
    assert finished.progress == stored.progress
    assert backend.record_progress([(lease, Progress(done=3))]) == [False]


def check_a_requested_task_going_back_ends_cancelled(harness: Harness) -> None:
    """retry, release and an expired lease each finalize a task with a request CANCELLED;
    requeue clears the request and the progress."""
    backend = harness.backend
    backend.enqueue([one_task(f"t{n}") for n in range(3)])
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=3)
    retried, released, expired = leases
    assert backend.mark_started([retried, expired]) == [True, True]
    backend.record_progress([(retried, Progress(done=1))])
    for lease in leases:
        assert backend.request_cancel(lease.task_id) is not None
    after_retry = backend.retry(retried, retried.record, timedelta(0))
    assert after_retry is not None
    assert after_retry.status is CANCELLED
    assert after_retry.progress is not None
    assert after_retry.cancel_requested_at is not None
    assert backend.retry(retried, retried.record, timedelta(0)) == after_retry  # a repeat
    [after_release] = backend.release([released])
    assert after_release is not None
    assert after_release.status is CANCELLED
    assert after_release.attempts == 0
    assert after_release.finished_at is not None
    harness.advance(LEASE * 2)
    assert backend.claim_expired(limit=5, claim_ttl=LEASE) == []
    reaped = backend.get(expired.task_id)
    assert reaped is not None
    assert reaped.status is CANCELLED
    assert reaped.attempts == 1
    failed = attrs.evolve(expired.record, status=TaskResultStatus.FAILED)
    assert backend.complete(expired, failed) is None  # its token was cleared
    requeued = backend.requeue(retried.task_id)
    assert requeued is not None
    assert requeued.status is TaskResultStatus.READY
    assert requeued.progress is None
    assert requeued.cancel_requested_at is None
    assert backend.get(retried.task_id) == requeued
    assert backend.counts()["default"].cancelled == 2
