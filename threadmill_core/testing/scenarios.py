"""Named scenarios every backend must pass: races, payload fidelity, bad input.

Each scenario is a plain function of a fresh `Harness`. `ConformanceSuite`
runs every one on every backend; outside it, a backend runs them as::

    @pytest.mark.parametrize("name", sorted(SCENARIOS))
    def test_scenario(name):
        SCENARIOS[name](make_my_harness())

`SCENARIOS` holds the races that fencing exists for (a late acknowledgement
after a reap, two reaper passes, a lapsed reaper claim, inspector actions on
running or finished tasks, repeats after a lost reply) and the orderings
that are easy to get subtly wrong (queues, priority, FIFO for thousands of
tasks enqueued in one call), and time on the backend's clock (due times,
retry delays, result expiry, and `next_due` where the backend answers it;
one whose `next_due` is None, the default, skips that scenario).
`PAYLOAD_CASES` are values that must come back value for value through
enqueue, claim, complete and get (`check_payload_round_trip`).
`BAD_INPUT_CASES` each make one call with a bad argument, which must raise
`ValueError` and change nothing.

A broken rule raises `ProtocolViolation`, whose first line says which.
Every wait is `Harness.advance`; nothing sleeps. Time steps are whole
minutes, so backends on a server clock (`Harness.exact_clock` False) pass
them too; boundaries that need an exact clock are checked only on one.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import attrs

from threadmill_core.backend import NOTHING_DEFERRED, Backend
from threadmill_core.errors import UnsupportedValue
from threadmill_core.models import (
    JSON,
    Decision,
    Lease,
    RetryPolicySpec,
    TaskError,
    TaskResult,
    TaskResultStatus,
)
from threadmill_core.testing.harness import Harness
from threadmill_core.testing.model import ProtocolViolation, same_value

READY = TaskResultStatus.READY
DEFERRED = TaskResultStatus.DEFERRED
RUNNING = TaskResultStatus.RUNNING
SUCCESSFUL = TaskResultStatus.SUCCESSFUL
FAILED = TaskResultStatus.FAILED
CANCELLED = TaskResultStatus.CANCELLED

LEASE_TTL = timedelta(minutes=1)
CLAIM_TTL = timedelta(minutes=1)
#: Long enough for any lease or claim of `LEASE_TTL` / `CLAIM_TTL` to have passed.
PAST_A_LEASE = timedelta(minutes=2)

Scenario = Callable[[Harness], None]


# --- helpers -------------------------------------------------------------------------


def expect(condition: bool, rule: str, expected: object = None, got: object = None) -> None:
    """Raise `ProtocolViolation` naming `rule` unless `condition` holds."""
    if not condition:
        shown = (
            ""
            if expected is None and got is None
            else f"\n  expected: {expected!r}\n  got:      {got!r}"
        )
        raise ProtocolViolation(rule + shown)


def new_task(
    task_id: str, *, queue: str = "default", priority: int = 0, **fields: Any
) -> TaskResult:
    """A record as a producer enqueues it."""
    return TaskResult(
        id=task_id, task_path="app.tasks:work", queue=queue, priority=priority, **fields
    )


def failure(message: str = "boom") -> TaskError:
    """An exception a task raised, as a worker records it."""
    return TaskError(exception_class_path="builtins.RuntimeError", message=message)


def lease_timeout() -> TaskError:
    """The error the reaper records for an expired lease."""
    return TaskError(
        exception_class_path="threadmill_core.errors.AcknowledgementTimeout",
        message="the lease expired before the worker acknowledged",
    )


def succeeded(lease: Lease, value: JSON = None) -> TaskResult:
    """The record a worker sends to complete `lease` successfully."""
    return attrs.evolve(lease.record, status=SUCCESSFUL, return_value=value)


def failed(lease: Lease, error: TaskError | None = None) -> TaskResult:
    """The record a worker sends with `complete` or `retry` after a failure."""
    error = error or failure()
    return attrs.evolve(lease.record, status=FAILED, errors=(*lease.record.errors, error))


def claim_one(
    backend: Backend, task_id: str, *, queue: str = "default", worker: str = "w1"
) -> Lease:
    """Claim from `queue` and insist the backend hands out `task_id`."""
    leases = backend.claim([queue], worker=worker, lease_ttl=LEASE_TTL)
    got = [lease.task_id for lease in leases]
    expect(got == [task_id], f"claim() must hand out the READY task {task_id!r}", [task_id], got)
    return leases[0]


def reap(harness: Harness, task_id: str) -> Lease:
    """Let every lease expire, then make a reaper claim and insist it is on `task_id` alone."""
    harness.advance(PAST_A_LEASE)
    leases = harness.backend.claim_expired(limit=100, claim_ttl=CLAIM_TTL)
    got = [lease.task_id for lease in leases]
    expect(
        got == [task_id],
        f"claim_expired() must claim the task whose lease expired ({task_id!r})",
        [task_id],
        got,
    )
    return leases[0]


def status_of(backend: Backend, task_id: str) -> TaskResultStatus | None:
    """The task's stored status, or None if the backend has no such task."""
    record = backend.get(task_id)
    return None if record is None else record.status


def snapshot(backend: Backend) -> dict[object, object]:
    """Everything a client can read: counts, and every segment of every queue in order."""
    counts = dict(backend.counts())
    state: dict[object, object] = {"counts": counts}
    for queue in counts:
        for status in TaskResultStatus:
            state[queue, status] = backend.peek(queue, status, offset=0, limit=10_000)
    return state


# --- race scenarios ------------------------------------------------------------------

SCENARIOS: dict[str, Scenario] = {}


def scenario(function: Scenario) -> Scenario:
    """Register `function` in `SCENARIOS` under its name."""
    SCENARIOS[function.__name__] = function
    return function


@scenario
def late_acknowledgement_after_a_reap_is_refused(harness: Harness) -> None:
    """A worker's acknowledgement that arrives after a reap cannot clobber the retry attempt."""
    backend = harness.backend
    backend.enqueue([new_task("t")])
    slow = claim_one(backend, "t", worker="slow")
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
    backend.claim(["default"], worker="w", lease_ttl=LEASE_TTL, limit=len(ids))
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
    claim_one(backend, "t")
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
    lost = claim_one(backend, "t")
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
    lease = claim_one(backend, "t", worker="w1")
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
def claim_takes_queues_in_the_order_given(harness: Harness) -> None:
    """claim() drains the first queue named before a later one, whatever the priorities."""
    backend = harness.backend
    backend.enqueue(
        [
            new_task("b-urgent", queue="b", priority=100),
            new_task("a-low", queue="a", priority=-5),
            new_task("a-high", queue="a", priority=5),
            new_task("c-ignored", queue="c", priority=100),
        ]
    )
    got = [lease.task_id for lease in backend.claim(["a", "b"], worker="w", lease_ttl=LEASE_TTL)]
    expect(got == ["a-high"], "claim() must take the first queue named first", ["a-high"], got)
    leases = backend.claim(["b", "a"], worker="w", lease_ttl=LEASE_TTL, limit=10)
    got = [lease.task_id for lease in leases]
    expected = ["b-urgent", "a-low"]
    expect(got == expected, "claim() returned tasks out of queue order", expected, got)
    expect(status_of(backend, "c-ignored") is READY, "claim() took a task from a queue not named")


@scenario
def fifo_within_a_priority_for_thousands_enqueued_at_once(harness: Harness) -> None:
    """2000 tasks enqueued in one call at one instant come out by priority, then exactly FIFO."""
    backend = harness.backend
    # Ids descend, so an order by id (or by anything but arrival) shows.
    ids = [f"task-{9999 - n:04}" for n in range(2000)]
    priorities = [7 if n % 3 == 0 else 0 for n in range(2000)]
    backend.enqueue(
        [new_task(task_id, priority=p) for task_id, p in zip(ids, priorities, strict=True)]
    )
    expected = [i for i, p in zip(ids, priorities, strict=True) if p == 7]
    expected += [i for i, p in zip(ids, priorities, strict=True) if p == 0]
    listed = [record.id for record in backend.peek("default", READY, offset=0, limit=2000)]
    expect(
        listed == expected,
        _first_difference("peek(READY) is not priority, then FIFO", expected, listed),
    )
    claimed: list[str] = []
    while len(claimed) < len(ids):
        batch = backend.claim(["default"], worker="w", lease_ttl=LEASE_TTL, limit=300)
        expect(bool(batch), "claim() returned nothing while tasks were READY")
        claimed += [lease.task_id for lease in batch]
    expect(
        claimed == expected,
        _first_difference("claim() is not priority, then FIFO", expected, claimed),
    )


def _first_difference(rule: str, expected: list[str], got: list[str]) -> str:
    """`rule`, and where two long lists of ids first part ways."""
    index = next(
        (i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b),
        min(len(expected), len(got)),
    )
    return (
        f"{rule}: first difference at position {index} of {len(expected)}: "
        f"expected {expected[index : index + 3]}, got {got[index : index + 3]}"
    )


@scenario
def enqueue_is_idempotent_on_id(harness: Harness) -> None:
    """Enqueueing a stored id again stores nothing and returns the stored record."""
    backend = harness.backend
    [stored] = backend.enqueue([new_task("t", args=[1])])
    again = backend.enqueue([new_task("t", queue="other", args=[2]), new_task("u")])
    expect(
        len(again) == 2 and again[0] == stored and again[1].id == "u",
        "enqueue() of a stored id must return the stored record in its place",
        [stored, "u"],
        again,
    )
    lease = claim_one(backend, "t")
    [while_running] = backend.enqueue([new_task("t", args=[3])])
    expect(
        while_running == backend.get("t") and while_running.status is RUNNING,
        "enqueue() of a running task's id must change nothing",
        lease.record,
        while_running,
    )
    counts = {queue: c.pending for queue, c in backend.counts().items()}
    expect(
        counts == {"default": 2},
        "enqueue() of a stored id stored a second task",
        {"default": 2},
        counts,
    )


@scenario
def requeue_keeps_id_errors_and_attempts(harness: Harness) -> None:
    """requeue() sends a FAILED task to the READY tail, keeping errors and attempts."""
    backend = harness.backend
    backend.enqueue([new_task("t"), new_task("u")])
    lease = claim_one(backend, "t")
    backend.complete(lease, failed(lease, failure("first")))
    requeued = backend.requeue("t")
    expect(
        requeued is not None
        and requeued.status is READY
        and requeued.attempts == 1
        and requeued.errors == (failure("first"),)
        and requeued.finished_at is None
        and requeued.return_value is None,
        "requeue() must keep id, errors and attempts and clear finished_at and return_value",
        "READY, attempts 1, errors kept",
        requeued,
    )
    order = [r.id for r in backend.peek("default", READY, offset=0, limit=10)]
    expect(
        order == ["u", "t"], "requeue() must put the task at the tail of READY", ["u", "t"], order
    )


@scenario
def deferred_tasks_fall_due_on_the_backend_clock(harness: Harness) -> None:
    """A future run_after defers a task until the backend's clock reaches it; claim promotes it."""
    backend = harness.backend
    later = backend.now() + timedelta(hours=1)
    [stored] = backend.enqueue([new_task("t", run_after=later)])
    expect(stored.status is DEFERRED, "enqueue() with a future run_after must store DEFERRED")
    expect(
        backend.claim(["default"], worker="w", lease_ttl=LEASE_TTL) == [],
        "claim() took a task before it was due",
    )
    harness.advance(timedelta(minutes=59))
    expect(backend.promote_due(limit=10) == 0, "promote_due() promoted a task before it was due")
    harness.advance(timedelta(minutes=1) if harness.exact_clock else timedelta(minutes=2))
    # On an exact clock this is the due moment itself: due means at or before now().
    got = [lease.task_id for lease in backend.claim(["default"], worker="w", lease_ttl=LEASE_TTL)]
    expect(got == ["t"], "claim() must promote a due DEFERRED task and take it", ["t"], got)


@scenario
def retry_delay_is_measured_on_the_backend_clock(harness: Harness) -> None:
    """retry() with a delay defers the task by that much of the backend's time."""
    backend = harness.backend
    backend.enqueue([new_task("t")])
    lease = claim_one(backend, "t")
    deferred = backend.retry(lease, failed(lease), timedelta(minutes=30))
    expect(deferred is not None and deferred.status is DEFERRED, "retry() with a delay must defer")
    harness.advance(timedelta(minutes=29))
    expect(
        backend.claim(["default"], worker="w", lease_ttl=LEASE_TTL) == [],
        "a retried task came back before its delay",
    )
    harness.advance(timedelta(minutes=2))
    again = claim_one(backend, "t")
    expect(
        again.record.attempts == 2,
        "the attempt after a retry must be attempt 2",
        2,
        again.record.attempts,
    )


def _expect_due_in(harness: Harness, expected: timedelta, rule: str) -> None:
    """`next_due()` says `expected`: exactly on an exact clock, else up to a minute less."""
    got = harness.backend.next_due()
    if harness.exact_clock or expected in (timedelta(0), NOTHING_DEFERRED):
        ok = got == expected
    else:  # a server clock creeps on while the test runs, so the wait only shrinks
        ok = got is not None and expected - timedelta(minutes=1) < got <= expected
    expect(ok, rule, expected, got)


@scenario
def next_due_counts_down_to_the_earliest_deferred_task(harness: Harness) -> None:
    """next_due() counts down to the first DEFERRED task of any queue, on the backend's clock."""
    backend = harness.backend
    if backend.next_due() is None:
        return  # the default: this backend cannot tell, and its callers poll instead
    _expect_due_in(harness, NOTHING_DEFERRED, "next_due() with no task must be NOTHING_DEFERRED")
    backend.enqueue([new_task("ready")])
    _expect_due_in(harness, NOTHING_DEFERRED, "next_due() counted a READY task as deferred")
    # Odd milliseconds, so a backend that rounds to seconds is caught on an exact clock.
    sooner, later = timedelta(minutes=30, milliseconds=125), timedelta(hours=1, milliseconds=250)
    now = backend.now()
    backend.enqueue(
        [
            new_task("later", run_after=now + later),
            new_task("sooner", queue="other", run_after=now + sooner),
        ]
    )
    _expect_due_in(harness, sooner, "next_due() must answer the earliest task of any queue")
    harness.advance(timedelta(minutes=20))
    elapsed = timedelta(minutes=20)
    _expect_due_in(harness, sooner - elapsed, "next_due() must count down with the clock")
    # On an exact clock, the due moment itself: due means at or before now().
    step = sooner - elapsed + (timedelta(0) if harness.exact_clock else timedelta(minutes=1))
    harness.advance(step)
    elapsed += step
    _expect_due_in(harness, timedelta(0), "next_due() must be zero once a task is due")
    harness.advance(timedelta(minutes=1))
    elapsed += timedelta(minutes=1)
    _expect_due_in(harness, timedelta(0), "next_due() must be zero, not negative, past due")
    promoted = backend.promote_due(limit=10)
    expect(promoted == 1, "promote_due() must promote the one due task", 1, promoted)
    _expect_due_in(
        harness, later - elapsed, "after a promotion next_due() must answer the next deferred task"
    )
    backend.cancel("later")
    _expect_due_in(harness, NOTHING_DEFERRED, "next_due() counted a cancelled task")
    lease = claim_one(backend, "ready")
    backend.retry(lease, failed(lease), timedelta(minutes=10))
    _expect_due_in(harness, timedelta(minutes=10), "next_due() must count a retry's delay")


@scenario
def finished_tasks_are_kept_for_result_ttl_then_gone(harness: Harness) -> None:
    """Finished tasks stay readable for result_ttl, then vanish; pending tasks never expire."""
    backend = harness.backend
    backend.enqueue([new_task(i) for i in ("ok", "bad", "cancelled", "pending")])
    ok = claim_one(backend, "ok")
    backend.complete(ok, succeeded(ok))
    bad = claim_one(backend, "bad")
    backend.complete(bad, failed(bad))
    backend.cancel("cancelled")
    harness.advance(harness.result_ttl - timedelta(minutes=1))
    kept = {i: status_of(backend, i) for i in ("ok", "bad", "cancelled")}
    expected = {"ok": SUCCESSFUL, "bad": FAILED, "cancelled": CANCELLED}
    expect(kept == expected, "a result expired before result_ttl passed", expected, kept)
    harness.advance(timedelta(minutes=2))
    gone = {i: backend.get(i) for i in ("ok", "bad", "cancelled")}
    expect(
        all(record is None for record in gone.values()),
        "a result outlived result_ttl",
        "get() -> None",
        gone,
    )
    counts = {
        queue: (c.pending, c.successful + c.failed + c.cancelled)
        for queue, c in backend.counts().items()
    }
    expect(
        counts == {"default": (1, 0)},
        "counts() still counts expired results (or lost the pending task)",
        {"default": (1, 0)},
        counts,
    )
    expect(status_of(backend, "pending") is READY, "a pending task expired with the results")


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


# --- payload fidelity ----------------------------------------------------------------


def _nested(depth: int) -> JSON:
    """`depth` levels of alternating dicts and lists around a string."""
    value: JSON = "bottom"
    for level in range(depth):
        value = [value] if level % 2 else {"level": value}
    return value


#: Values that must come back value for value (see `same_value`).
PAYLOAD_CASES: dict[str, JSON] = {
    "empty list": [],
    "empty dict": {},
    "2**63 + 1": 2**63 + 1,
    "-2**200": -(2**200),
    "2**53 + 1": 2**53 + 1,
    "0.1": 0.1,
    "pi": math.pi,
    "-0.0": -0.0,
    "inf": math.inf,
    "-inf": -math.inf,
    "nan": math.nan,
    "smallest subnormal": 5e-324,
    "bool is not int": [True, 1, 1.0, False, 0, None],
    "non-ASCII text and emoji": "naïve café — 日本語 — 🚀👩🏽‍🚀",
    "NUL and control characters": "a\x00b\x1f\n\t\u2028",
    "dict key order": {"z": 1, "a": 2, "m": {"y": 3, "b": 4}},
    "empty and non-ASCII keys": {"": 0, "ключ": [], "🔑": {}},
    "deep nesting": _nested(100),
    "long string": "threadmill " * 10_000,
    "mixed": {"ints": [0, -1, 2**64], "floats": [1e308, -1e-308], "s": "x", "none": None},
}


def check_payload_round_trip(harness: Harness, value: JSON) -> None:
    """Send `value` through enqueue, claim, complete(return_value) and get; it must not change."""
    backend = harness.backend

    def same(where: str, got: JSON) -> None:
        expect(same_value(value, got), f"{where} changed the value", value, got)

    [stored] = backend.enqueue([new_task("payload", args=[value], kwargs={"value": value})])
    same("enqueue() (args)", stored.args[0] if stored.args else "<no args>")
    same("enqueue() (kwargs)", stored.kwargs.get("value", "<missing>"))
    lease = claim_one(backend, "payload")
    same("claim() (args)", lease.record.args[0] if lease.record.args else "<no args>")
    same("claim() (kwargs)", lease.record.kwargs.get("value", "<missing>"))
    done = backend.complete(lease, succeeded(lease, value))
    expect(done is not None, "complete() refused a current lease")
    assert done is not None
    same("complete() (return_value)", done.return_value)
    got = backend.get("payload")
    expect(got is not None, "get() lost the task")
    assert got is not None
    same("get() (args)", got.args[0] if got.args else "<no args>")
    same("get() (kwargs)", got.kwargs.get("value", "<missing>"))
    same("get() (return_value)", got.return_value)


# --- bad input -----------------------------------------------------------------------


def _busy(harness: Harness) -> Lease:
    """Fill a backend with a READY task, a due DEFERRED task and a RUNNING task whose
    lease expired (so a bad call has something to wrongly touch); return that lease."""
    backend = harness.backend
    backend.enqueue(
        [
            new_task("running"),
            new_task("ready"),
            new_task("due", run_after=backend.now() + timedelta(minutes=1)),
        ]
    )
    lease = claim_one(backend, "running")
    harness.advance(PAST_A_LEASE)
    return lease


BadCall = Callable[[Backend, Lease], object]


def _refused(rule: str, error: type[Exception], call: BadCall) -> Scenario:
    """A bad-input case: on a busy backend, `call` must raise `error` and change nothing."""

    def case(harness: Harness) -> None:
        lease = _busy(harness)
        before = snapshot(harness.backend)
        try:
            call(harness.backend, lease)
        except error:
            pass
        else:
            raise ProtocolViolation(f"{rule} must raise {error.__name__}")
        after = snapshot(harness.backend)
        expect(
            after == before,
            f"{rule} raised {error.__name__} but changed the stored state",
            before,
            after,
        )

    case.__doc__ = f"{rule} raises {error.__name__} and changes nothing."
    return case


def _claim(queues: Any = ("default",), **arguments: Any) -> BadCall:
    """A `claim` with good arguments except those given."""
    options = {"worker": "w", "lease_ttl": LEASE_TTL, **arguments}
    return lambda b, _: b.claim(queues, **options)


def _complete_as(status: TaskResultStatus) -> BadCall:
    """A `complete` that asks for `status`."""
    return lambda b, lease: b.complete(lease, attrs.evolve(lease.record, status=status))


def _decide_many_ending_with(bad: Callable[[Lease], Decision]) -> BadCall:
    """A batch whose first decision is fine: the whole batch must be refused before it starts."""
    return lambda b, lease: b.decide_many(
        [Decision(lease=lease, record=succeeded(lease)), bad(lease)]
    )


_BAD_CALLS: dict[str, tuple[type[Exception], BadCall]] = {
    "claim() with limit 0": (ValueError, _claim(limit=0)),
    "claim() with a negative limit": (ValueError, _claim(limit=-1)),
    "claim() with a zero lease_ttl": (ValueError, _claim(lease_ttl=timedelta(0))),
    "claim() with a negative lease_ttl": (ValueError, _claim(lease_ttl=-LEASE_TTL)),
    "claim() with a bare str for queues": (TypeError, _claim(queues="default")),
    "claim() with a lease_ttl in seconds, not a timedelta": (ValueError, _claim(lease_ttl=60)),
    "extend() with a zero lease_ttl": (ValueError, lambda b, lease: b.extend(lease, timedelta(0))),
    "extend_many() with a negative lease_ttl": (
        ValueError,
        lambda b, lease: b.extend_many([lease], -LEASE_TTL),
    ),
    "complete() with status READY": (ValueError, _complete_as(READY)),
    "complete() with status RUNNING": (ValueError, _complete_as(RUNNING)),
    "complete() with status DEFERRED": (ValueError, _complete_as(DEFERRED)),
    "complete() with status CANCELLED": (ValueError, _complete_as(CANCELLED)),
    "complete() with the record of another task": (
        ValueError,
        lambda b, lease: b.complete(lease, attrs.evolve(succeeded(lease), id="ready")),
    ),
    "complete() with a return value the codec cannot carry": (
        UnsupportedValue,
        lambda b, lease: b.complete(lease, succeeded(lease, {"when": (1, 2)})),
    ),
    "decide_many() ending with a return value the codec cannot carry": (
        UnsupportedValue,
        _decide_many_ending_with(
            lambda lease: Decision(lease=lease, record=succeeded(lease, {1, 2}))
        ),
    ),
    "retry() with a negative delay": (
        ValueError,
        lambda b, lease: b.retry(lease, failed(lease), -LEASE_TTL),
    ),
    "retry() with the record of another task": (
        ValueError,
        lambda b, lease: b.retry(lease, attrs.evolve(failed(lease), id="ready"), timedelta(0)),
    ),
    "decide_many() ending with a bad status": (
        ValueError,
        _decide_many_ending_with(
            lambda lease: Decision(lease=lease, record=attrs.evolve(lease.record, status=READY))
        ),
    ),
    "decide_many() ending with a negative delay": (
        ValueError,
        _decide_many_ending_with(
            lambda lease: Decision(lease=lease, record=failed(lease), retry_delay=-LEASE_TTL)
        ),
    ),
    "claim_expired() with limit 0": (
        ValueError,
        lambda b, _: b.claim_expired(limit=0, claim_ttl=CLAIM_TTL),
    ),
    "claim_expired() with a claim_ttl in seconds, not a timedelta": (
        ValueError,
        lambda b, _: b.claim_expired(limit=10, claim_ttl=60),  # type: ignore[arg-type]
    ),
    "claim_expired() with a zero claim_ttl": (
        ValueError,
        lambda b, _: b.claim_expired(limit=10, claim_ttl=timedelta(0)),
    ),
    "promote_due() with limit 0": (ValueError, lambda b, _: b.promote_due(limit=0)),
    "peek() with a negative offset": (
        ValueError,
        lambda b, _: b.peek("default", READY, offset=-1, limit=10),
    ),
    "purge() of RUNNING": (ValueError, lambda b, _: b.purge("default", RUNNING)),
    "enqueue() of a record whose args are a tuple": (
        UnsupportedValue,
        lambda b, _: b.enqueue([new_task("fresh-1", args=(1, 2))]),
    ),
    "enqueue() of a record whose kwargs are not a dict": (
        UnsupportedValue,
        lambda b, _: b.enqueue([new_task("fresh-1", kwargs=None)]),
    ),
    "enqueue() of a record whose retry policy's path is not a str": (
        UnsupportedValue,
        lambda b, _: b.enqueue([new_task("fresh-1", retry=RetryPolicySpec(path=5))]),  # type: ignore[arg-type]
    ),
    "enqueue() of a record whose id is not a str": (
        UnsupportedValue,
        lambda b, _: b.enqueue([new_task(5)]),  # type: ignore[arg-type]  # on purpose
    ),
    "enqueue() of a batch ending with a queue that is not a str": (
        UnsupportedValue,
        lambda b, _: b.enqueue(
            [new_task("fresh-1"), new_task("fresh-2", queue=3)]  # type: ignore[arg-type]
        ),
    ),
}

#: Bad arguments at the storage interface: each raises (ValueError; TypeError for
#: a bare str as queues; UnsupportedValue for a return value the codec cannot
#: carry, or a record to enqueue whose args are not a list, whose kwargs are not a
#: dict, whose id or queue is not a str, or whose retry policy the codec cannot
#: carry) and changes nothing.
BAD_INPUT_CASES: dict[str, Scenario] = {
    rule: _refused(rule, error, call) for rule, (error, call) in _BAD_CALLS.items()
}
