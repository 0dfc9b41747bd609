"""Cancel requests: an operator stops a RUNNING task through its lease holder.

`request_cancel` stores the first request on a RUNNING task and refuses
every other task; the holder hears of it at its next renewal
(`Lease.cancel_requested`) and finalizes the task CANCELLED with `complete`;
a task that finishes first keeps its outcome; and a task with a request
never goes back to READY or DEFERRED: `retry`, `release` and `claim_expired`
(after `expire_leases` too) finalize it CANCELLED. `requeue` clears it.
"""

from __future__ import annotations

from datetime import timedelta

import attrs

from threadmill_core.models import Lease, Progress, TaskError, TaskResult
from threadmill_core.testing._scenarios.kit import (
    CANCELLED,
    CLAIM_TTL,
    LEASE_TTL,
    PAST_A_LEASE,
    READY,
    RUNNING,
    SUCCESSFUL,
    Scenario,
    claim_one,
    expect,
    failed,
    lease_timeout,
    new_task,
    reap,
    registering,
    snapshot,
    start_one,
    succeeded,
)
from threadmill_core.testing.harness import Harness

#: This module's scenarios, by name (`threadmill_core.testing.scenarios.SCENARIOS` holds all).
SCENARIOS: dict[str, Scenario] = {}
scenario = registering(SCENARIOS)


def stopped(lease: Lease) -> TaskResult:
    """The record a worker sends to `complete` a task it stopped at a cancel request."""
    error = TaskError(
        exception_class_path="threadmill_core.errors.TaskCancelled",
        message="the task was cancelled while it ran",
    )
    return attrs.evolve(lease.record, status=CANCELLED, errors=(*lease.record.errors, error))


def request(harness: Harness, task_id: str) -> TaskResult:
    """`request_cancel(task_id)`, insisting it is taken and stamped on a RUNNING record."""
    answer = harness.backend.request_cancel(task_id)
    expect(
        answer is not None and answer.status is RUNNING and answer.cancel_requested_at is not None,
        "request_cancel() of a RUNNING task must store the request and return the record",
        "RUNNING with cancel_requested_at set",
        answer,
    )
    assert answer is not None
    return answer


def renewed(harness: Harness, lease: Lease) -> Lease:
    """`extend(lease)`, insisting the renewal is taken."""
    answer = harness.backend.extend(lease, LEASE_TTL)
    expect(answer is not None, "extend() refused a current lease on a RUNNING task")
    assert answer is not None
    return answer


@scenario
def a_cancel_request_is_stored_once_and_told_at_the_next_renewal(harness: Harness) -> None:
    """The first request is stored, a repeat changes nothing, the holder's renewal says so,
    and `complete` with CANCELLED finalizes the task with the error given."""
    backend = harness.backend
    backend.enqueue([new_task("t")])
    lease = start_one(backend, "t")
    expect(not lease.cancel_requested, "claim() returned a lease with cancel_requested set")
    expect(
        not renewed(harness, lease).cancel_requested,
        "extend() said a cancel was requested before any was",
    )
    first = request(harness, "t")
    again = backend.request_cancel("t")
    expect(
        again == first,
        "a repeated request_cancel() must change nothing (the first request wins)",
        first,
        again,
    )
    without = attrs.evolve(first, cancel_requested_at=None)
    expect(
        without == lease.record,
        "request_cancel() must change nothing but cancel_requested_at",
        lease.record,
        first,
    )
    told = renewed(harness, lease)
    expect(
        told.cancel_requested and told.token == lease.token,
        "extend() must say a cancel was requested (Lease.cancel_requested), token unchanged",
        True,
        told.cancel_requested,
    )
    many = backend.extend_many([lease], LEASE_TTL)
    expect(
        len(many) == 1 and many[0] is not None and many[0].cancel_requested,
        "extend_many() must say a cancel was requested (Lease.cancel_requested)",
        True,
        many,
    )
    sent = stopped(told)
    done = backend.complete(told, sent)
    expect(
        done is not None
        and done.status is CANCELLED
        and done.errors == sent.errors
        and done.finished_at is not None
        and done.cancel_requested_at == first.cancel_requested_at
        and done.return_value is None,
        "complete() with CANCELLED must finalize the task CANCELLED, errors as given, "
        "finished_at now, the cancel request kept",
        "CANCELLED with the TaskCancelled error",
        done,
    )
    repeat = backend.complete(told, sent)
    expect(
        repeat == done, "a repeated complete(CANCELLED) must answer as the first time", done, repeat
    )
    expect(backend.extend(told, LEASE_TTL) is None, "extend() renewed a lease on a CANCELLED task")
    expect(backend.request_cancel("t") is None, "request_cancel() of a CANCELLED task was taken")


@scenario
def request_cancel_refuses_every_task_that_is_not_running(harness: Harness) -> None:
    """READY, DEFERRED and finished tasks and unknown ids are refused, and nothing changes."""
    backend = harness.backend
    later = backend.now() + timedelta(hours=1)
    backend.enqueue([new_task("done")])
    lease = start_one(backend, "done")
    backend.enqueue([new_task("ready"), new_task("deferred", run_after=later)])
    backend.complete(lease, succeeded(lease, 1))
    before = snapshot(backend)
    for task_id in ("ready", "deferred", "done", "unknown"):
        answer = backend.request_cancel(task_id)
        expect(
            answer is None,
            f"request_cancel() must refuse a task that is not RUNNING ({task_id!r})",
            None,
            answer,
        )
    expect(snapshot(backend) == before, "a refused request_cancel() changed what is stored")


@scenario
def a_task_that_finishes_before_hearing_of_a_cancel_keeps_its_outcome(harness: Harness) -> None:
    """A task that ends SUCCESSFUL or FAILED after a request ends so, with the request kept."""
    backend = harness.backend
    backend.enqueue([new_task("ok"), new_task("bad")])
    ok, bad = start_one(backend, "ok"), start_one(backend, "bad")
    for lease in (ok, bad):
        request(harness, lease.task_id)
    done = backend.complete(ok, succeeded(ok, "value"))
    expect(
        done is not None
        and done.status is SUCCESSFUL
        and done.return_value == "value"
        and done.cancel_requested_at is not None,
        "complete() of a task with a cancel request must keep its outcome (SUCCESSFUL)",
        "SUCCESSFUL",
        done,
    )
    gone = backend.complete(bad, failed(bad))
    expect(
        gone is not None and gone.status.value == "FAILED",
        "complete() of a task with a cancel request must keep its outcome (FAILED)",
        "FAILED",
        gone,
    )


@scenario
def a_retry_of_a_task_with_a_cancel_request_finalizes_it_cancelled(harness: Harness) -> None:
    """A worker's or a reaper's `retry` of a task with a request ends it CANCELLED, errors
    as given; a repeat answers as the first time; nothing claims it again."""
    backend = harness.backend
    backend.enqueue([new_task("w"), new_task("r")])
    worker = start_one(backend, "w")
    request(harness, "w")
    sent = failed(worker)
    done = backend.retry(worker, sent, timedelta(0))
    expect(
        done is not None
        and done.status is CANCELLED
        and done.errors == sent.errors
        and done.finished_at is not None,
        "retry() of a task with a cancel request must finalize it CANCELLED (errors as given)",
        "CANCELLED",
        done,
    )
    repeat = backend.retry(worker, sent, timedelta(0))
    expect(repeat == done, "a repeated retry() must answer as the first time", done, repeat)
    reaped = start_one(backend, "r", worker="dead")
    reaper = reap(harness, "r")
    request(harness, "r")
    ended = backend.retry(
        reaper, attrs.evolve(reaper.record, errors=(lease_timeout(),)), timedelta(hours=1)
    )
    expect(
        ended is not None and ended.status is CANCELLED,
        "a reaper's retry() of a task with a cancel request must finalize it CANCELLED",
        "CANCELLED",
        ended,
    )
    expect(
        backend.complete(reaped, succeeded(reaped)) is None,
        "complete() accepted a stale lease on a CANCELLED task",
    )
    left = backend.claim(["default"], worker="w2", lease_ttl=LEASE_TTL, limit=10)
    expect(left == [], "claim() handed out a task that was finalized CANCELLED", [], left)


@scenario
def a_release_of_a_task_with_a_cancel_request_finalizes_it_cancelled(harness: Harness) -> None:
    """A released claim with a request is undone (uncharged) and the task ends CANCELLED."""
    backend = harness.backend
    backend.enqueue([new_task("t")])
    lease = claim_one(backend, "t")
    request(harness, "t")
    [answer] = backend.release([lease], timedelta(minutes=5))
    expect(
        answer is not None
        and answer.status is CANCELLED
        and answer.attempts == 0
        and answer.worker_ids == ()
        and answer.started_at is None
        and answer.finished_at is not None,
        "release() of a task with a cancel request must undo the claim and finalize it "
        "CANCELLED (not READY or DEFERRED)",
        "CANCELLED, attempts 0",
        answer,
    )
    expect(
        backend.extend(lease, LEASE_TTL) is None, "extend() accepted a lease that release() cleared"
    )


@scenario
def an_expired_task_with_a_cancel_request_is_finalized_cancelled(harness: Harness) -> None:
    """`claim_expired` finalizes expired tasks with a request CANCELLED (started: as they
    are; unstarted: the claim undone), returns none of them and claims the others."""
    backend = harness.backend
    backend.enqueue([new_task("started"), new_task("unstarted"), new_task("plain")])
    started = start_one(backend, "started")
    claim_one(backend, "unstarted")
    start_one(backend, "plain")
    request(harness, "started")
    request(harness, "unstarted")
    harness.advance(PAST_A_LEASE)
    leases = backend.claim_expired(limit=10, claim_ttl=CLAIM_TTL)
    got = [lease.task_id for lease in leases]
    expect(
        got == ["plain"],
        "claim_expired() must claim only the expired tasks without a cancel request",
        ["plain"],
        got,
    )
    first = backend.get("started")
    expect(
        first is not None
        and first.status is CANCELLED
        and first.attempts == 1
        and first.errors == ()
        and first.finished_at is not None,
        "claim_expired() must finalize a started expired task with a cancel request "
        "CANCELLED, recording no error",
        "CANCELLED, attempts 1",
        first,
    )
    second = backend.get("unstarted")
    expect(
        second is not None
        and second.status is CANCELLED
        and second.attempts == 0
        and second.worker_ids == (),
        "claim_expired() must undo an unstarted expired claim with a cancel request and "
        "finalize it CANCELLED",
        "CANCELLED, attempts 0",
        second,
    )
    expect(
        backend.complete(started, stopped(started)) is None,
        "complete() accepted a lease whose task claim_expired() finalized CANCELLED",
    )


@scenario
def expire_leases_then_the_reaper_finalize_a_cancel_request(harness: Harness) -> None:
    """A dead worker's task with a request, its lease cut short, ends CANCELLED at the next
    reaper pass."""
    backend = harness.backend
    backend.enqueue([new_task("t")])
    start_one(backend, "t", worker="dead")
    request(harness, "t")
    cut = backend.expire_leases("dead")
    expect(cut == 1, "expire_leases() must cut the dead worker's live lease", 1, cut)
    leases = backend.claim_expired(limit=10, claim_ttl=CLAIM_TTL)
    expect(leases == [], "claim_expired() claimed a task with a cancel request", [], leases)
    record = backend.get("t")
    expect(
        record is not None and record.status is CANCELLED,
        "claim_expired() must finalize an expired task with a cancel request CANCELLED",
        "CANCELLED",
        record,
    )


@scenario
def requeue_clears_the_cancel_request_and_the_progress(harness: Harness) -> None:
    """A task requeued after it was cancelled while running starts afresh: no request, no
    progress; its next claim and renewal say no cancel was requested."""
    backend = harness.backend
    backend.enqueue([new_task("t")])
    lease = start_one(backend, "t")
    backend.record_progress([(lease, Progress(done=3, total=4))])
    request(harness, "t")
    backend.complete(lease, stopped(lease))
    again = backend.requeue("t")
    expect(
        again is not None
        and again.status is READY
        and again.cancel_requested_at is None
        and again.progress is None
        and len(again.errors) == 1,
        "requeue() must clear cancel_requested_at and progress, keeping the errors",
        "READY without a cancel request or progress",
        again,
    )
    fresh = claim_one(backend, "t")
    expect(
        not renewed(harness, fresh).cancel_requested,
        "extend() said a cancel was requested after requeue() cleared it",
    )
