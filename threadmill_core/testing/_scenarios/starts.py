"""Recorded starts: only an attempt that ran is charged (see "Recorded starts" in backend.py).

A claim whose start was never recorded (`mark_started`) goes back to READY
uncharged when its lease expires, however often, and the task's later
leases say how often; a started claim is charged through the reaper; `release`
refuses a started claim; `mark_started` is fenced, idempotent and changes
nothing a reader sees; and a reaper pass gives back every unstarted claim
it meets without counting it toward its limit.
"""

from __future__ import annotations

from datetime import timedelta

import attrs

from threadmill_core.models import Lease, TaskResult
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
    succeeded,
)
from threadmill_core.testing.harness import Harness

#: This module's scenarios, by name (`threadmill_core.testing.scenarios.SCENARIOS` holds all).
SCENARIOS: dict[str, Scenario] = {}
scenario = registering(SCENARIOS)


def _expire_unstarted(harness: Harness, lease: Lease) -> TaskResult:
    """Let `lease` (never marked) expire, run a reaper pass, and insist it gave the task back."""
    backend = harness.backend
    harness.advance(PAST_A_LEASE)
    reaped = backend.claim_expired(limit=100, claim_ttl=CLAIM_TTL)
    expect(
        reaped == [],
        "claim_expired() charged a claim whose start was never recorded: it must give the "
        "task back to READY uncharged instead of claiming it for the reaper",
        [],
        [got.task_id for got in reaped],
    )
    stored = backend.get(lease.task_id)
    expect(
        stored is not None and stored.status is READY,
        "claim_expired() must give back an expired claim whose start was never recorded (READY)",
        "READY",
        stored,
    )
    assert stored is not None
    return stored


def _refused_everywhere(harness: Harness, lease: Lease, after: str) -> None:
    """Every fenced operation with `lease` must be refused, changing nothing."""
    backend = harness.backend
    before = snapshot(backend)
    expect(backend.extend(lease, LEASE_TTL) is None, f"extend() accepted a lease {after}")
    expect(
        backend.complete(lease, succeeded(lease)) is None, f"complete() accepted a lease {after}"
    )
    expect(
        backend.retry(lease, failed(lease), timedelta(0)) is None,
        f"retry() accepted a lease {after}",
    )
    expect(backend.mark_started([lease]) == [False], f"mark_started() accepted a lease {after}")
    expect(backend.release([lease]) == [None], f"release() accepted a lease {after}")
    expect(snapshot(backend) == before, f"a refused call with a lease {after} changed the state")


@scenario
def an_unstarted_claim_that_expires_goes_back_uncharged(harness: Harness) -> None:
    """A claim never marked started that expires goes back to READY as it was before that claim."""
    backend = harness.backend
    backend.enqueue([new_task("t")])
    first = start_one(backend, "t", worker="w1")
    backend.retry(first, failed(first), timedelta(0))  # attempt 1 ran and failed
    before = backend.get("t")
    assert before is not None
    prefetched = claim_one(backend, "t", worker="w2")  # attempt 2, claimed but never started
    back = _expire_unstarted(harness, prefetched)
    expected = attrs.evolve(before, status=READY)
    for name in ("attempts", "errors", "worker_ids", "started_at", "last_attempted_at"):
        want, got = getattr(expected, name), getattr(back, name)
        if name == "last_attempted_at":
            # As `release` leaves it: the undone claim's time while an attempt is left.
            want, got = want is None, got is None
        expect(
            want == got,
            f"claim_expired() giving back an unstarted claim must leave {name} as it was "
            "before that claim",
            want,
            got,
        )
    _refused_everywhere(harness, prefetched, "whose unstarted claim claim_expired() gave back")
    again = claim_one(backend, "t", worker="w3")
    expect(
        again.record.attempts == 2 and again.record.worker_ids == ("w1", "w3"),
        "the claim after a give-back must be the next attempt (the unstarted one never counted)",
        "attempts 2 by ('w1', 'w3')",
        again.record,
    )

    backend.enqueue([new_task("fresh")])
    never = claim_one(backend, "fresh")
    back = _expire_unstarted(harness, never)
    expect(
        back.attempts == 0
        and back.worker_ids == ()
        and back.started_at is None
        and back.last_attempted_at is None
        and back.errors == (),
        "a task whose only claim never started must go back with no attempt, no worker, "
        "no start and no error",
        "attempts 0, worker_ids (), started_at None, last_attempted_at None, errors ()",
        back,
    )


@scenario
def a_started_claim_that_expires_is_charged(harness: Harness) -> None:
    """A claim marked started that expires is claimed for the reaper, whose decision charges it."""
    backend = harness.backend
    backend.enqueue([new_task("t")])
    start_one(backend, "t")
    reaper = reap(harness, "t")
    decided = backend.complete(
        reaper,
        attrs.evolve(reaper.record, status=FAILED, errors=(lease_timeout(),)),
    )
    expect(
        decided is not None
        and decided.status is FAILED
        and decided.attempts == 1
        and decided.errors == (lease_timeout(),),
        "the reaper must decide a started claim that expired: FAILED, attempt 1, "
        "the AcknowledgementTimeout recorded",
        "FAILED after 1 attempt with AcknowledgementTimeout",
        decided,
    )


@scenario
def an_unstarted_claim_is_always_given_back_and_later_leases_count_it(harness: Harness) -> None:
    """An unstarted claim that expires always goes back uncharged, however often; every later
    worker lease says how often (a reaper's says 0), a requeue keeps the count, and a started
    claim is charged."""
    backend = harness.backend
    backend.enqueue([new_task("t")])
    for given_back in range(5):
        lease = claim_one(backend, "t", worker=f"w{given_back}")
        expect(
            lease.unstarted_expiries == given_back,
            "a worker's lease must carry how many expired unstarted claims of the task were "
            "given back (unstarted_expiries)",
            given_back,
            lease.unstarted_expiries,
        )
        back = _expire_unstarted(harness, lease)
        expect(back.attempts == 0, "a given-back unstarted claim counted an attempt", 0, back)
    started = start_one(backend, "t", worker="last")
    expect(started.unstarted_expiries == 5, "the count of give-backs was lost", 5, started)
    reaped = reap(harness, "t")
    expect(reaped.unstarted_expiries == 0, "a reaper's lease must carry unstarted_expiries 0")
    expect(
        reaped.record.attempts == 1 and reaped.record.worker_ids == ("last",),
        "the charged expiry is the task's one attempt",
        "attempts 1 by ('last',)",
        reaped.record,
    )
    done = backend.complete(
        reaped, attrs.evolve(reaped.record, status=FAILED, errors=(lease_timeout(),))
    )
    expect(done is not None and done.status is FAILED, "the reaper's decision was refused")
    expect(backend.requeue("t") is not None, "requeue() refused a FAILED task")
    again = claim_one(backend, "t", worker="after-requeue")
    expect(
        again.unstarted_expiries == 5,
        "requeue() reset the count of unstarted expiries; it must keep it (nothing resets it)",
        5,
        again.unstarted_expiries,
    )
    backend.enqueue([new_task("fresh")])
    fresh = claim_one(backend, "fresh")
    expect(fresh.unstarted_expiries == 0, "a task never given back must lease with 0")


@scenario
def an_id_purged_and_enqueued_again_counts_its_give_backs_from_zero(harness: Harness) -> None:
    """A task purged and enqueued again under its id is a new task: its leases count the
    give-backs of the new task only, never those of the one purged."""
    backend = harness.backend
    for segment in (READY, FAILED):
        backend.enqueue([new_task("again")])
        _expire_unstarted(harness, claim_one(backend, "again"))
        if segment is FAILED:
            lease = claim_one(backend, "again")
            expect(lease.unstarted_expiries == 1, "the count of give-backs was lost", 1, lease)
            backend.complete(lease, failed(lease))
        purged = backend.purge("default", segment)
        expect(purged == 1, f"purge() of {segment.value} must delete the task", 1, purged)
        backend.enqueue([new_task("again")])
        lease = claim_one(backend, "again")
        expect(
            lease.unstarted_expiries == 0,
            f"an id purged ({segment.value}) and enqueued again is a new task: its lease must "
            "not count the give-backs of the task purged (unstarted_expiries)",
            0,
            lease.unstarted_expiries,
        )
        backend.complete(lease, succeeded(lease))
        backend.purge("default", SUCCESSFUL)


@scenario
def mark_started_is_fenced_idempotent_and_changes_nothing_seen(harness: Harness) -> None:
    """mark_started takes only a current worker lease on a RUNNING task, answers a repeat True,
    answers each lease of a batch on its own, and leaves every record and deadline as it was."""
    backend = harness.backend
    backend.enqueue([new_task(task_id) for task_id in ("a", "b", "c", "d")])
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE_TTL, limit=4)
    expect(
        [lease.task_id for lease in leases] == ["a", "b", "c", "d"],
        "claim() must hand out the READY tasks in order",
        ["a", "b", "c", "d"],
        [lease.task_id for lease in leases],
    )
    a, b, c, d = leases
    done = backend.complete(c, succeeded(c))
    expect(done is not None, "complete() refused a current lease")
    backend.release([d])
    before = snapshot(backend)
    answers = backend.mark_started([a, c, b, d, a])
    expect(
        answers == [True, False, True, False, True],
        "mark_started() must take current leases on RUNNING tasks (a repeat too) and refuse "
        "a decided task and a given-back one, each on its own",
        [True, False, True, False, True],
        answers,
    )
    expect(backend.mark_started([a]) == [True], "a repeated mark_started() must answer True")
    expect(
        snapshot(backend) == before,
        "mark_started() changed what a reader sees (records, segments, order)",
    )
    stale = attrs.evolve(a, token=f"{a.token}-made-up")
    expect(backend.mark_started([stale]) == [False], "mark_started() accepted a made-up token")
    expect(backend.mark_started([]) == [], "mark_started() of no lease must answer []")
    # The marks held: a's and b's expiries are charged; their deadlines were not moved.
    harness.advance(PAST_A_LEASE)
    reaped = backend.claim_expired(limit=100, claim_ttl=CLAIM_TTL)
    expect(
        sorted(got.task_id for got in reaped) == ["a", "b"],
        "claim_expired() must claim the expired started claims (their marks were recorded)",
        ["a", "b"],
        sorted(got.task_id for got in reaped),
    )
    expect(
        backend.mark_started(reaped) == [False, False],
        "mark_started() accepted a reaper's lease (a reaper claim is decided, never marked)",
    )


@scenario
def release_refuses_a_started_claim_and_a_reaper_lease(harness: Harness) -> None:
    """A task whose start was recorded is never given back, nor is a reaper's claim."""
    backend = harness.backend
    backend.enqueue([new_task("reaped"), new_task("started"), new_task("waiting")])
    start_one(backend, "reaped")
    reaper = reap(harness, "reaped")
    started = start_one(backend, "started")
    waiting = claim_one(backend, "waiting")
    before = snapshot(backend)
    answers = backend.release([started, reaper])
    expect(
        answers == [None, None],
        "release() accepted a started claim or a reaper's lease; a task that began to run is "
        "never given back, and a reaper's claim is decided, never released",
        [None, None],
        answers,
    )
    expect(snapshot(backend) == before, "a refused release() changed the stored state")
    given = backend.release([waiting])
    expect(
        len(given) == 1 and given[0] is not None and given[0].status is READY,
        "release() must give back an unstarted claim",
        "READY",
        given,
    )


@scenario
def a_reaper_pass_gives_back_the_unstarted_claims_it_meets_beyond_its_limit(
    harness: Harness,
) -> None:
    """Given-back claims do not count toward limit: the pass gives back every unstarted claim
    before its last claim, in deadline order, and leaves the rest for the next pass."""
    backend = harness.backend
    ids = ["t1", "t2", "t3", "t4", "t5"]
    backend.enqueue([new_task(task_id) for task_id in ids])
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE_TTL, limit=5)
    expect(
        [lease.task_id for lease in leases] == ids,
        "claim() must hand out the READY tasks in order",
        ids,
        [lease.task_id for lease in leases],
    )
    mark(backend, leases[1], leases[3])  # t2 and t4 started; t1, t3, t5 prefetched
    harness.advance(PAST_A_LEASE)
    first = backend.claim_expired(limit=1, claim_ttl=CLAIM_TTL)
    expect(
        [got.task_id for got in first] == ["t2"],
        "claim_expired(limit=1) must give back t1 (unstarted) without counting it, then claim t2",
        ["t2"],
        [got.task_id for got in first],
    )
    statuses = {task_id: getattr(backend.get(task_id), "status", None) for task_id in ids}
    expect(
        statuses == {"t1": READY, "t2": RUNNING, "t3": RUNNING, "t4": RUNNING, "t5": RUNNING},
        "a pass must stop at its limit-th claim: t1 given back, t2 claimed, the rest left",
        {"t1": "READY", "t2": "RUNNING", "t3": "RUNNING", "t4": "RUNNING", "t5": "RUNNING"},
        statuses,
    )
    second = backend.claim_expired(limit=10, claim_ttl=CLAIM_TTL)
    expect(
        [got.task_id for got in second] == ["t4"],
        "the next pass must give back t3 and t5 and claim t4",
        ["t4"],
        [got.task_id for got in second],
    )
    ready = [record.id for record in backend.peek("default", READY)]
    expect(
        ready == ["t1", "t3", "t5"],
        "given-back tasks enter READY at its tail, in the order the passes met them",
        ["t1", "t3", "t5"],
        ready,
    )
    expect(
        backend.claim_expired(limit=10, claim_ttl=CLAIM_TTL) == [],
        "claim_expired() claimed a task twice, or one whose reaper claim is live",
    )
