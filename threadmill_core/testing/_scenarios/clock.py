"""Time on the backend's clock: due times, retry delays, `next_due`, result expiry.

Every wait is `Harness.advance`; nothing sleeps. Steps are whole minutes,
so a backend on a server clock (`Harness.exact_clock` False) passes too;
boundaries that need an exact clock are checked only on one. A backend
whose `next_due` is None (the default) skips that scenario.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from threadmill_core.backend import NOTHING_DEFERRED
from threadmill_core.testing._scenarios.kit import (
    CANCELLED,
    DEFERRED,
    FAILED,
    LEASE_TTL,
    READY,
    SUCCESSFUL,
    Scenario,
    claim_one,
    expect,
    failed,
    new_task,
    registering,
    status_of,
    succeeded,
)
from threadmill_core.testing.harness import Harness

#: This module's scenarios, by name (`threadmill_core.testing.scenarios.SCENARIOS` holds all).
SCENARIOS: dict[str, Scenario] = {}
scenario = registering(SCENARIOS)


def _on_the_millisecond(what: str, moment: object) -> None:
    """`moment` is an aware UTC datetime on a whole millisecond (or None)."""
    if moment is None:
        return
    expect(
        isinstance(moment, datetime)
        and moment.utcoffset() == timedelta(0)
        and moment.microsecond % 1000 == 0,
        f"{what} must be an aware UTC datetime at millisecond resolution (the backend's clock)",
        "UTC, whole milliseconds",
        moment,
    )


@scenario
def every_time_the_backend_tells_is_utc_on_a_whole_millisecond(harness: Harness) -> None:
    """now(), lease deadlines and every timestamp the backend writes are aware UTC datetimes
    at millisecond resolution, on any clock (an exact one compares them to the millisecond)."""
    backend = harness.backend
    _on_the_millisecond("now()", backend.now())
    backend.enqueue([new_task("t"), new_task("u")])
    lease = claim_one(backend, "t")
    _on_the_millisecond("a lease's deadline", lease.deadline)
    renewed = backend.extend(lease, LEASE_TTL)
    _on_the_millisecond("a renewed lease's deadline", getattr(renewed, "deadline", None))
    retried = backend.retry(lease, failed(lease), timedelta(microseconds=1500))
    lease = claim_one(backend, "u")
    done = backend.complete(lease, succeeded(lease))
    for record in (retried, done, backend.get("t"), backend.get("u")):
        expect(record is not None, "a task the scenario stored must be readable")
        assert record is not None
        for name in ("enqueued_at", "run_after", "started_at", "last_attempted_at"):
            _on_the_millisecond(f"the record's {name}", getattr(record, name))
        _on_the_millisecond("the record's finished_at", record.finished_at)


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
def a_run_after_long_past_is_due_at_once(harness: Harness) -> None:
    """A run_after before the epoch (a negative time) is as due as any past one: READY, claimed
    and run, its run_after read back as given."""
    backend = harness.backend
    long_ago = datetime(1, 1, 1, tzinfo=UTC)
    just_before_the_epoch = datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)
    stored = backend.enqueue(
        [
            new_task("ancient", run_after=long_ago),
            new_task("pre-epoch", run_after=just_before_the_epoch),
        ]
    )
    expect(
        [record.status for record in stored] == [READY, READY],
        "enqueue() with a run_after in the past must store READY, however long ago",
        [READY, READY],
        [record.status for record in stored],
    )
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE_TTL, limit=10)
    expect(
        [lease.task_id for lease in leases] == ["ancient", "pre-epoch"],
        "claim() must take tasks whose run_after is before 1970, in order (not quarantine them)",
        ["ancient", "pre-epoch"],
        [lease.task_id for lease in leases],
    )
    expect(
        [lease.record.run_after for lease in leases] == [long_ago, just_before_the_epoch],
        "a run_after before 1970 must read back as stored",
        [long_ago, just_before_the_epoch],
        [lease.record.run_after for lease in leases],
    )


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


@scenario
def a_delay_under_a_millisecond_rounds_up_to_one(harness: Harness) -> None:
    """retry() and release() with a delay under a millisecond defer the task by one
    millisecond (rounded up), never send it to the READY tail as a zero delay does."""
    backend = harness.backend
    backend.enqueue([new_task("retried"), new_task("released")])
    tiny = timedelta(microseconds=1)
    lease = claim_one(backend, "retried")
    before = backend.now()
    retried = backend.retry(lease, failed(lease), tiny)
    lease = claim_one(backend, "released")
    [released] = backend.release([lease], tiny)
    for op, record in (("retry()", retried), ("release()", released)):
        expect(
            record is not None and record.status is DEFERRED,
            f"{op} with a delay under a millisecond must defer the task (the delay rounds up "
            "to one millisecond); only a delay of exactly zero sends it to the READY tail",
            DEFERRED,
            record,
        )
        assert record is not None
        one_ms = before + timedelta(milliseconds=1)
        expect(
            record.run_after is not None
            and (record.run_after == one_ms if harness.exact_clock else record.run_after >= one_ms),
            f"{op} with a delay under a millisecond must make run_after now() + 1 ms",
            one_ms,
            record.run_after,
        )


@scenario
def a_release_with_a_delay_defers_the_task_uncharged(harness: Harness) -> None:
    """release() with a delay gives the claim back undone, DEFERRED for that much backend time."""
    backend = harness.backend
    backend.enqueue([new_task("t")])
    lease = claim_one(backend, "t")
    [back] = backend.release([lease], timedelta(minutes=30))
    expect(
        back is not None
        and back.status is DEFERRED
        and (back.attempts, back.worker_ids, back.errors) == (0, (), ())
        and back.started_at is None,
        "release() with a delay must defer the task with its claim undone",
        "DEFERRED, attempts 0, no worker, no error, started_at None",
        back,
    )
    expect(
        backend.release([lease], timedelta(minutes=30)) == [None],
        "release() accepted a lease it had already given back",
    )
    harness.advance(timedelta(minutes=29))
    expect(
        backend.claim(["default"], worker="w", lease_ttl=LEASE_TTL) == [],
        "a task released with a delay came back before its delay",
    )
    harness.advance(timedelta(minutes=2))
    again = claim_one(backend, "t")
    expect(
        again.record.attempts == 1,
        "the claim after a release is attempt 1 again: a release is not charged",
        1,
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
