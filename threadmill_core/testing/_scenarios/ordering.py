"""The orderings easy to get subtly wrong: queues, priority, FIFO, ids, the READY tail.

Claims take queues in the order given, then priority, then arrival (for
thousands enqueued in one call too); enqueue is idempotent on id; a requeued
task goes to the tail.
"""

from __future__ import annotations

from threadmill_core.testing._scenarios.kit import (
    LEASE_TTL,
    READY,
    RUNNING,
    Scenario,
    claim_one,
    expect,
    failed,
    failure,
    new_task,
    registering,
    status_of,
)
from threadmill_core.testing.harness import Harness

#: This module's scenarios, by name (`threadmill_core.testing.scenarios.SCENARIOS` holds all).
SCENARIOS: dict[str, Scenario] = {}
scenario = registering(SCENARIOS)


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
