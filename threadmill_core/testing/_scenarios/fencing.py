"""The races fencing exists for: late acknowledgements, reapers, operators, lost replies.

A late acknowledgement after a reap, two reaper passes at once, a lapsed
reaper claim, inspector actions on running or finished tasks, repeats after
a lost reply, and a lease from before a purge of its id: each must be
refused, or answered as the first time, and change nothing it must not.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import attrs

from threadmill_core.models import (
    Decision,
)
from threadmill_core.testing._scenarios.kit import (
    CLAIM_TTL,
    FAILED,
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
    mark,
    new_task,
    reap,
    registering,
    snapshot,
    start_one,
    status_of,
    succeeded,
)
from threadmill_core.testing.harness import Harness

#: This module's scenarios, by name (`threadmill_core.testing.scenarios.SCENARIOS` holds all).
SCENARIOS: dict[str, Scenario] = {}
scenario = registering(SCENARIOS)


@scenario
def late_acknowledgement_after_a_reap_is_refused(harness: Harness) -> None:
    """A worker's acknowledgement that arrives after a reap cannot clobber the retry attempt."""
    backend = harness.backend
    backend.enqueue([new_task("t")])
    slow = start_one(backend, "t", worker="slow")
    reaper = reap(harness, "t")
    expect(
        backend.complete(slow, succeeded(slow, "late")) is None,
        "complete() accepted a stale token while the reaper held the task",
    )
    sent_back = backend.retry(
        reaper, attrs.evolve(reaper.record, errors=(lease_timeout(),)), timedelta(0)
    )
    expect(sent_back is not None, "retry() refused the reaper's current claim")
    second = claim_one(backend, "t", worker="fresh")
    expect(
        backend.complete(slow, succeeded(slow, "late")) is None,
        "complete() accepted a late acknowledgement after the task was retried",
    )
    expect(
        backend.retry(slow, failed(slow), timedelta(0)) is None,
        "retry() accepted a late decision after the task was retried",
    )
    stored = backend.get("t")
    expect(
        stored is not None and stored.status is RUNNING and stored.attempts == 2,
        "a late acknowledgement changed the retry attempt",
        "RUNNING, attempt 2",
        stored,
    )
    done = backend.complete(second, succeeded(second, "fresh"))
    expect(
        done is not None and done.return_value == "fresh" and done.errors == (lease_timeout(),),
        "complete() with the current lease must finalize the retry attempt",
        "SUCCESSFUL with 'fresh' and the AcknowledgementTimeout error",
        done,
    )


@scenario
def two_reaper_passes_at_once_never_claim_one_task(harness: Harness) -> None:
    """Two reaper passes running at the same time claim disjoint sets of expired tasks."""
    backend = harness.backend
    ids = [f"t{i:03}" for i in range(60)]
    backend.enqueue([new_task(task_id) for task_id in ids])
    mark(backend, *backend.claim(["default"], worker="w", lease_ttl=LEASE_TTL, limit=len(ids)))
    harness.advance(PAST_A_LEASE)
    start = threading.Barrier(2)
    passes: list[list[str]] = [[], []]
    errors: list[BaseException] = []

    def reaper_pass(index: int) -> None:
        try:
            start.wait()
            leases = backend.claim_expired(limit=len(ids), claim_ttl=CLAIM_TTL)
            passes[index] = [lease.task_id for lease in leases]
        except BaseException as exc:  # handed to the test thread below
            errors.append(exc)

    threads = [threading.Thread(target=reaper_pass, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        # A generous bound, only so that a deadlocked backend fails instead of hanging.
        thread.join(timeout=120)
    expect(not any(t.is_alive() for t in threads), "claim_expired() never returned (deadlock?)")
    if errors:
        raise errors[0]
    both = set(passes[0]) & set(passes[1])
    expect(not both, "two reaper passes claimed the same task", "no overlap", sorted(both))
    claimed = sorted(passes[0] + passes[1])
    expect(claimed == ids, "the reaper passes together must claim every expired task", ids, claimed)
    again = backend.claim_expired(limit=len(ids), claim_ttl=CLAIM_TTL)
    expect(
        again == [],
        "claim_expired() claimed a task whose reaper claim is still live",
        [],
        [lease.task_id for lease in again],
    )


@scenario
def stale_reaper_decision_after_its_claim_lapsed_is_refused(harness: Harness) -> None:
    """A stalled reaper's decision is refused once its claim lapsed and another pass took over."""
    backend = harness.backend
    backend.enqueue([new_task("t")])
    start_one(backend, "t")
    stalled = reap(harness, "t")
    second = reap(harness, "t")
    expect(second.token != stalled.token, "claim_expired() reused the lapsed claim's token")
    expect(
        backend.retry(
            stalled, attrs.evolve(stalled.record, errors=(lease_timeout(),)), timedelta(0)
        )
        is None,
        "retry() accepted a stale reaper claim (a later reaper claim replaced it)",
    )
    expect(
        backend.complete(stalled, failed(stalled, lease_timeout())) is None,
        "complete() accepted a stale reaper claim (a later reaper claim replaced it)",
    )
    decided = backend.complete(second, failed(second, lease_timeout()))
    expect(
        decided is not None and decided.status is FAILED and len(decided.errors) == 1,
        "the current reaper claim must decide the task, once",
        "FAILED with one AcknowledgementTimeout",
        decided,
    )
    expect(
        backend.retry(stalled, stalled.record, timedelta(0)) is None,
        "retry() accepted a stale reaper claim after the task was finalized",
    )


@scenario
def requeue_of_a_running_task_is_refused(harness: Harness) -> None:
    """An inspector's requeue cannot resurrect a running task, whose lease stays valid."""
    backend = harness.backend
    backend.enqueue([new_task("t")])
    lease = claim_one(backend, "t")
    expect(backend.requeue("t") is None, "requeue() accepted a RUNNING task")
    expect(status_of(backend, "t") is RUNNING, "a refused requeue() changed the task")
    expect(
        backend.complete(lease, succeeded(lease)) is not None,
        "a refused requeue() took the lease away",
    )


@scenario
def requeue_of_a_successful_task_is_refused(harness: Harness) -> None:
    """An inspector's requeue cannot resurrect a task that finished successfully."""
    backend = harness.backend
    backend.enqueue([new_task("t")])
    lease = claim_one(backend, "t")
    done = backend.complete(lease, succeeded(lease, 42))
    expect(backend.requeue("t") is None, "requeue() accepted a SUCCESSFUL task")
    expect(backend.get("t") == done, "a refused requeue() changed the task", done, backend.get("t"))


@scenario
def cancel_of_a_running_task_is_refused(harness: Harness) -> None:
    """Cancel only acts on READY or DEFERRED tasks; a running task keeps its lease."""
    backend = harness.backend
    backend.enqueue([new_task("t")])
    lease = claim_one(backend, "t")
    expect(backend.cancel("t") is None, "cancel() accepted a RUNNING task")
    expect(status_of(backend, "t") is RUNNING, "a refused cancel() changed the task")
    expect(backend.extend(lease, LEASE_TTL) is not None, "a refused cancel() took the lease away")


@scenario
def extend_after_a_reap_is_refused(harness: Harness) -> None:
    """A heartbeat with a lease the reaper replaced is refused, alone or in a batch."""
    backend = harness.backend
    backend.enqueue([new_task("t")])
    lost = start_one(backend, "t")
    reaper = reap(harness, "t")
    expect(backend.extend(lost, LEASE_TTL) is None, "extend() accepted a stale token after a reap")
    answers = backend.extend_many([lost, reaper], LEASE_TTL)
    expect(
        len(answers) == 2 and answers[0] is None,
        "extend_many() accepted a stale token after a reap",
        [None, "a renewed lease"],
        answers,
    )
    renewed = answers[1]
    expect(
        renewed is not None and renewed.token == reaper.token,
        "extend_many() must renew the current lease and keep its token",
        reaper.token,
        renewed,
    )


@scenario
def repeated_complete_after_a_lost_reply_answers_as_the_first_time(harness: Harness) -> None:
    """complete() sent again with the same lease returns the stored record and changes nothing."""
    backend = harness.backend
    backend.enqueue([new_task("t"), new_task("u")])
    lease = claim_one(backend, "t")
    first = backend.complete(lease, succeeded(lease, [1, 2]))
    expect(first is not None, "complete() refused a current lease")
    before = snapshot(backend)
    for again in (
        backend.complete(lease, succeeded(lease, [1, 2])),
        backend.decide_many([Decision(lease=lease, record=succeeded(lease, [1, 2]))])[0],
        backend.complete(lease, failed(lease)),
    ):
        expect(again == first, "a repeated complete() must return the stored record", first, again)
    expect(snapshot(backend) == before, "a repeated complete() changed the stored state")
    expect(
        backend.retry(lease, failed(lease), timedelta(0)) is None,
        "retry() accepted a lease whose complete() already finalized the task",
    )


@scenario
def repeated_retry_after_a_lost_reply_answers_as_the_first_time(harness: Harness) -> None:
    """retry() sent again returns the stored record, keeping the task's place and due time."""
    backend = harness.backend
    backend.enqueue([new_task("t"), new_task("u")])
    now_lease = claim_one(backend, "t")
    first = backend.retry(now_lease, failed(now_lease), timedelta(0))
    backend.enqueue([new_task("v")])
    before = snapshot(backend)
    again = backend.retry(now_lease, failed(now_lease), timedelta(0))
    expect(again == first, "a repeated retry() must return the stored record", first, again)
    expect(
        snapshot(backend) == before,
        "a repeated retry() changed the stored state (it must not move the task to the tail again)",
    )

    later_lease = claim_one(backend, "u")
    first = backend.retry(later_lease, failed(later_lease), timedelta(hours=1))
    harness.advance(timedelta(minutes=5))
    again = backend.retry(later_lease, failed(later_lease), timedelta(hours=1))
    expect(
        again == first,
        "a repeated retry() must return the stored record (not a new due time)",
        first,
        again,
    )
    expect(
        backend.complete(later_lease, succeeded(later_lease)) is None,
        "complete() accepted a lease whose retry() already sent the task back",
    )


@scenario
def requeue_and_cancel_end_the_repeat_window(harness: Harness) -> None:
    """After requeue() or cancel() cleared the token, the old lease can decide nothing."""
    backend = harness.backend
    backend.enqueue([new_task("t"), new_task("u")])
    lease = claim_one(backend, "t")
    backend.complete(lease, failed(lease))
    requeued = backend.requeue("t")
    expect(requeued is not None and requeued.status is READY, "requeue() refused a FAILED task")
    expect(
        backend.complete(lease, failed(lease)) is None,
        "complete() accepted a token that requeue() cleared",
    )
    other = claim_one(backend, "u")
    backend.retry(other, failed(other), timedelta(hours=1))
    expect(backend.cancel("u") is not None, "cancel() refused a DEFERRED task")
    expect(
        backend.retry(other, failed(other), timedelta(hours=1)) is None,
        "retry() accepted a token that cancel() cleared",
    )


@scenario
def lease_expiry_leaves_attempts_unchanged(harness: Harness) -> None:
    """A reaper claim is not an attempt: attempts, worker_ids and last_attempted_at stay."""
    backend = harness.backend
    backend.enqueue([new_task("t")])
    lease = start_one(backend, "t", worker="w1")
    reaper = reap(harness, "t")
    for where, record in (("the reaper's lease", reaper.record), ("get()", backend.get("t"))):
        expect(
            record is not None
            and record.attempts == 1
            and record.worker_ids == ("w1",)
            and record.last_attempted_at == lease.record.last_attempted_at,
            f"a reaper claim counted as an attempt (seen in {where})",
            "attempts 1, worker_ids ('w1',), last_attempted_at unchanged",
            record,
        )
    sent_back = backend.retry(
        reaper, attrs.evolve(reaper.record, errors=(lease_timeout(),)), timedelta(0)
    )
    expect(
        sent_back is not None and sent_back.attempts == 1,
        "retry() after a reap must keep attempts",
        1,
        sent_back,
    )
    again = claim_one(backend, "t", worker="w2")
    expect(
        again.record.attempts == 2 and again.record.worker_ids == ("w1", "w2"),
        "the claim after a reap must be attempt 2",
        "attempts 2 by ('w1', 'w2')",
        again.record,
    )


@scenario
def a_lease_from_before_a_purge_cannot_decide_the_id_enqueued_again(harness: Harness) -> None:
    """A purged id enqueued again gets fresh tokens: an old lease on that id stays stale."""
    backend = harness.backend
    backend.enqueue([new_task("t")])
    old = claim_one(backend, "t")
    backend.complete(old, succeeded(old))
    expect(backend.purge("default", SUCCESSFUL) == 1, "purge() must drop the SUCCESSFUL task")
    backend.enqueue([new_task("t")])
    new = claim_one(backend, "t")
    expect(new.token != old.token, "claim() reused a token the id had before the purge")
    expect(
        backend.complete(old, succeeded(old, "old")) is None,
        "complete() accepted a lease from before a purge",
    )
    expect(
        backend.complete(new, succeeded(new, "new")) is not None,
        "complete() refused the current lease",
    )
