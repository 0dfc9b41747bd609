"""Telemetry (`Backend.rates`): what entered a queue and what finished, and nothing else.

A backend whose `rates` answers None (the default: no history kept) skips
these. One that keeps telemetry counts, per queue, the tasks `enqueue`
stored (not a repeat of a stored id) and `requeue` sent back, and the tasks
that reached SUCCESSFUL, FAILED or CANCELLED (quarantined poison included);
retries, promotions, give-backs, reaper claims and purges count for neither.
Every step here stays well inside one hour, so a window of `RATE_HISTORY`
covers all of it on any bucket size.
"""

from __future__ import annotations

from datetime import timedelta

from threadmill_core.backend import RATE_HISTORY
from threadmill_core.models import QueueRates
from threadmill_core.testing._scenarios.kit import (
    CLAIM_TTL,
    LEASE_TTL,
    PAST_A_LEASE,
    READY,
    Scenario,
    expect,
    failed,
    mark,
    new_task,
    registering,
    succeeded,
)
from threadmill_core.testing.harness import Harness

#: This module's scenarios, by name (`threadmill_core.testing.scenarios.SCENARIOS` holds all).
SCENARIOS: dict[str, Scenario] = {}
scenario = registering(SCENARIOS)


#: Windows asked for, each with the span its answer must say it covered: one inside the
#: history (everything here happened within it), the history, and one past it.
WINDOWS = (
    (timedelta(minutes=30), timedelta(minutes=30)),
    (RATE_HISTORY, RATE_HISTORY),
    (2 * RATE_HISTORY, RATE_HISTORY),
)


def _expect_rates(harness: Harness, entered: int, finished: int, after: str) -> None:
    """Queue "q" shows `entered` and `finished` over every window of `WINDOWS`, each
    covering what it says, and no other queue shows."""
    for window, covered in WINDOWS:
        got = dict(harness.backend.rates(window) or {})
        want = {"q": QueueRates(queue="q", window=covered, entered=entered, finished=finished)}
        expect(
            got == want,
            f"rates() after {after} must count the tasks that entered the queue (enqueue of "
            "a new id, requeue) and that finished (SUCCESSFUL, FAILED, CANCELLED), nothing "
            f"else; over a window of {window} it covers {covered} (at most the history kept)",
            want,
            got,
        )


@scenario
def rates_count_what_entered_and_finished_and_nothing_else(harness: Harness) -> None:
    """rates() counts new tasks and requeues as entered and every terminal state reached as
    finished; a repeated id, retries, promotions, give-backs and purges count for neither."""
    backend = harness.backend
    idle = backend.rates(RATE_HISTORY)
    if idle is None:
        return  # this backend keeps no telemetry
    expect(dict(idle) == {}, "rates() of an idle backend must be an empty mapping", {}, idle)
    later = backend.now() + timedelta(minutes=1)
    backend.enqueue(
        [new_task(i, queue="q") for i in ("a", "b", "c")]
        + [new_task("d", queue="q", run_after=later)]
    )
    backend.enqueue([new_task("a", queue="q"), new_task("a", queue="q")])
    backend.enqueue_calls(new_task("template", queue="q"), [("a", [], {}), ("e", [], {})])
    _expect_rates(harness, 5, 0, "enqueue() of new ids and of stored ones")

    a, b = backend.claim(["q"], worker="w1", lease_ttl=LEASE_TTL, limit=2)
    backend.complete(a, succeeded(a))
    backend.retry(b, failed(b), timedelta(0))
    _expect_rates(harness, 5, 1, "a claim, a complete() and a zero-delay retry()")

    prefetch = backend.claim(["q"], worker="w1", lease_ttl=LEASE_TTL, limit=10)
    expect(
        sorted(lease.task_id for lease in prefetch) == ["b", "c", "e"],
        "claim() must hand out every READY task",
        ["b", "c", "e"],
        [lease.task_id for lease in prefetch],
    )
    backend.release(prefetch)
    cancelled = backend.cancel("c")
    expect(cancelled is not None, "cancel() of a READY task must apply", "CANCELLED", cancelled)
    backend.requeue("c")
    _expect_rates(harness, 6, 2, "release(), cancel() and requeue()")

    harness.advance(PAST_A_LEASE)
    backend.promote_due(limit=10)
    leases = {
        lease.task_id: lease
        for lease in backend.claim(["q"], worker="w2", lease_ttl=LEASE_TTL, limit=10)
    }
    expect(
        sorted(leases) == ["b", "c", "d", "e"],
        "claim() must hand out every READY task",
        ["b", "c", "d", "e"],
        sorted(leases),
    )
    mark(backend, leases["b"])
    backend.complete(leases["c"], failed(leases["c"]))
    harness.advance(PAST_A_LEASE)
    [reaped] = backend.claim_expired(limit=10, claim_ttl=CLAIM_TTL)  # d and e given back
    backend.retry(reaped, failed(reaped), timedelta(minutes=1))
    _expect_rates(harness, 6, 3, "a promotion, give-backs, a reaper claim and its retry()")

    backend.purge("q", READY)
    _expect_rates(harness, 6, 3, "purge()")

    damage = harness.corruptions.get("payload garbled")
    if damage is not None:
        backend.enqueue([new_task("poison", queue="q")])
        damage("poison")
        handed = backend.claim(["q"], worker="w3", lease_ttl=LEASE_TTL)
        expect(handed == [], "claim() must quarantine poison, not hand it out", [], handed)
        _expect_rates(harness, 7, 4, "claim() quarantining poison")
