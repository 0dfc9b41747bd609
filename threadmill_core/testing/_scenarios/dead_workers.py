"""A dead worker's leases: `expire_leases` expires them at once, through the reaper's rules.

A supervisor that saw a worker process die expires that worker's live
leases; the reaper's next pass then decides them as any expired lease (an
unstarted claim given back uncharged, a started one charged). Nothing else
changes: not the records, not a reaper's claim, not a lease already
expired, not another worker's lease (one whose id merely ends like the dead
worker's included).
"""

from __future__ import annotations

from datetime import timedelta

from threadmill_core.testing._scenarios.kit import (
    CLAIM_TTL,
    PAST_A_LEASE,
    READY,
    RUNNING,
    Scenario,
    expect,
    mark,
    new_task,
    registering,
    succeeded,
)
from threadmill_core.testing.harness import Harness

#: This module's scenarios, by name (`threadmill_core.testing.scenarios.SCENARIOS` holds all).
SCENARIOS: dict[str, Scenario] = {}
scenario = registering(SCENARIOS)

DEAD = "host:1:dead"
#: Another worker whose id ends with the dead one's, length prefix and all, as a
#: backend that stores ids as "<length>:<id>" concatenated would see it.
ALIVE = "x11:host:1:dead"
SHORT = timedelta(minutes=1)
LONG = timedelta(hours=1)


@scenario
def expire_leases_expires_a_dead_workers_leases_and_nothing_else(harness: Harness) -> None:
    """expire_leases expires every live lease of the worker's claims, changes no record, leaves
    a reaper's claim, an expired lease and other workers' leases alone; the reaper then gives
    back the unstarted claims uncharged and charges the started one."""
    backend = harness.backend
    # r: the dead worker's claim, expired and taken over by a reaper claim that is live.
    backend.enqueue([new_task("r")])
    [lease_r] = backend.claim(["default"], worker=DEAD, lease_ttl=SHORT)
    mark(backend, lease_r)
    harness.advance(PAST_A_LEASE)
    reaped = backend.claim_expired(limit=100, claim_ttl=LONG)
    expect([got.task_id for got in reaped] == ["r"], "claim_expired() must claim r", ["r"], reaped)
    # x: the dead worker's claim, expired already (short lease).
    backend.enqueue([new_task("x")])
    backend.claim(["default"], worker=DEAD, lease_ttl=SHORT)
    # a (started) and b (prefetched): the dead worker's live claims; c: another worker's.
    backend.enqueue([new_task(task_id) for task_id in ("a", "b", "c")])
    a, b = backend.claim(["default"], worker=DEAD, lease_ttl=LONG, limit=2)
    mark(backend, a)
    [c] = backend.claim(["default"], worker=ALIVE, lease_ttl=LONG)
    expect(
        [a.task_id, b.task_id, c.task_id] == ["a", "b", "c"],
        "claim() must hand out the READY tasks in order",
    )
    harness.advance(PAST_A_LEASE)  # x's lease runs out; every other lease and claim is live
    ids = ("r", "x", "a", "b", "c")
    before = {task_id: backend.get(task_id) for task_id in ids}

    cut = backend.expire_leases(DEAD)
    expect(
        cut == 2,
        "expire_leases() must expire the live leases of the worker's claims (a and b) and "
        "answer how many; not a reaper's claim (r), not an expired lease (x), not another "
        "worker's (c)",
        2,
        cut,
    )
    after = {task_id: backend.get(task_id) for task_id in ids}
    expect(after == before, "expire_leases() changed a record", before, after)
    expect(backend.expire_leases(DEAD) == 0, "a repeated expire_leases() must answer 0")
    expect(backend.expire_leases("nobody") == 0, "expire_leases() of an unknown worker answered")

    passed = backend.claim_expired(limit=100, claim_ttl=CLAIM_TTL)
    expect(
        [got.task_id for got in passed] == ["a"],
        "after expire_leases() the reaper's pass must charge the started claim (a) and give "
        "back the unstarted ones (b, x); r's reaper claim and c's lease are live",
        ["a"],
        [got.task_id for got in passed],
    )
    statuses = {task_id: getattr(backend.get(task_id), "status", None) for task_id in ids}
    expected = {"r": RUNNING, "x": READY, "a": RUNNING, "b": READY, "c": RUNNING}
    expect(statuses == expected, "the tasks ended in the wrong segments", expected, statuses)
    back = backend.get("b")
    expect(
        back is not None and back.attempts == 0 and back.worker_ids == () and back.errors == (),
        "a prefetched task of the dead worker must go back uncharged",
        "attempts 0, no worker, no error",
        back,
    )
    expect(backend.extend(c, LONG) is not None, "expire_leases() broke another worker's lease")
    expect(
        backend.complete(a, succeeded(a)) is None,
        "the dead worker's lease decided a task the reaper had claimed",
    )
    expect(
        backend.complete(reaped[0], succeeded(reaped[0])) is not None,
        "expire_leases() broke a reaper's claim",
    )
