"""How the state machine judges a backend's answers: records, orders, timestamps.

Pure functions of what the backend returned and what the model expects;
each returns the names of what differs (or a sentence saying what is wrong),
and the machine turns that into a `ProtocolViolation` naming the rule.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from threadmill_core.models import TaskResult, TaskResultStatus
from threadmill_core.testing.model import Candidate, same_value

#: How a segment is ordered: the name of each part of its group key, then the tie-break.
ORDERS: Mapping[TaskResultStatus, tuple[str, ...]] = {
    TaskResultStatus.READY: (
        "priority (higher first)",
        "FIFO (the order tasks entered READY)",
        "id",
    ),
    TaskResultStatus.DEFERRED: ("run_after", "id"),
    TaskResultStatus.RUNNING: ("lease deadline", "id"),
    TaskResultStatus.SUCCESSFUL: ("finished_at", "id"),
    TaskResultStatus.FAILED: ("finished_at", "id"),
    TaskResultStatus.CANCELLED: ("finished_at", "id"),
}
#: How `claim` picks tasks: queues in the order given, then READY order.
CLAIM_ORDER = (
    "queue order (queues are taken in the order given)",
    *ORDERS[TaskResultStatus.READY],
)
#: How `claim_expired` picks tasks.
EXPIRED_ORDER = ("oldest lease deadline first", "id")

TIME_FIELDS = (
    "enqueued_at",
    "run_after",
    "started_at",
    "last_attempted_at",
    "finished_at",
    "cancel_requested_at",
)
PAYLOAD_FIELDS = ("args", "kwargs", "return_value")


def show(value: object) -> str:
    """A short form of `value` for a failure message (records by id and status)."""
    if isinstance(value, TaskResult):
        return f"TaskResult(id={value.id!r}, status={value.status.value}, ...)"
    return repr(value)


def record_diff(expected: TaskResult, got: TaskResult, *, exact: bool) -> list[str]:
    """The names of the fields in which `got` is not `expected`.

    Payload fields are compared value for value (`same_value`); timestamps
    exactly if `exact`, otherwise only for presence.
    """
    if (
        exact
        and expected == got
        and all(same_value(getattr(expected, f), getattr(got, f)) for f in PAYLOAD_FIELDS)
    ):
        return []  # the common case, decided fast; `==` alone lets 1 pass for True
    fields = []
    for attribute in attrs.fields(TaskResult):
        name = attribute.name
        want, have = getattr(expected, name), getattr(got, name)
        if name in TIME_FIELDS and not exact:
            same = (want is None) == (have is None)
        elif name == "progress" and not exact and want is not None and have is not None:
            # Its `updated_at` is a time like the others: judged for presence only.
            same = bool(
                attrs.evolve(want, updated_at=None) == attrs.evolve(have, updated_at=None)
                and (want.updated_at is None) == (have.updated_at is None)
            )
        elif name in PAYLOAD_FIELDS:
            same = same_value(want, have)
        elif name == "retry" and want is not None and have is not None:
            same = want.path == have.path and same_value(want.options, have.options)
        else:
            same = bool(want == have)
        if not same:
            fields.append(name)
    return fields


def time_order_problem(record: TaskResult) -> str | None:
    """Which pair of a record's own timestamps is out of order, if any."""
    pairs = (
        ("enqueued_at", "started_at"),
        ("started_at", "last_attempted_at"),
        ("enqueued_at", "finished_at"),
        ("last_attempted_at", "finished_at"),
        ("started_at", "cancel_requested_at"),
        ("cancel_requested_at", "finished_at"),
    )
    for earlier, later in pairs:
        first, second = getattr(record, earlier), getattr(record, later)
        if first is not None and second is not None and first > second:
            return f"{earlier} ({first.isoformat()}) is after {later} ({second.isoformat()})"
    return None


def order_problem(
    op: str,
    parts: Sequence[str],
    candidates: Sequence[Candidate],
    limit: int,
    got_ids: Sequence[str],
    *,
    exact: bool,
    stranger: str,
) -> str | None:
    """Why `got_ids` is not the first `limit` of `candidates` (in exact order), or None.

    With `exact` False, tasks whose group keys are equal may come in any
    order and a limit may cut such a group anywhere. `parts` names the parts
    of the order (group key parts, then the id tie-break) and `stranger`
    completes "{op} ..." for a task that is no candidate at all.
    """
    expected = list(candidates[:limit])
    want = [task_id for _, task_id in expected]
    got = list(got_ids)
    if got == want:
        return None
    key_of = {task_id: key for key, task_id in candidates}
    if len(set(got)) != len(got):
        return f"{op} returned the same task twice: {got}"
    strangers = [task_id for task_id in got if task_id not in key_of]
    if strangers:
        return f"{op} {stranger}: {strangers}"
    if len(got) != len(want):
        return (
            f"{op} returned {len(got)} tasks where {len(want)} were expected "
            f"(limit {limit}, {len(candidates)} available)"
        )
    if not exact and [key_of[i] for i in got] == [key for key, _ in expected]:
        return None

    def full(task_id: str) -> tuple[Any, ...]:
        return (*key_of[task_id], task_id) if exact else key_of[task_id]

    def why(better: str, worse: str) -> str:
        pairs = enumerate(zip(full(better), full(worse), strict=True))
        return parts[next(index for index, (a, b) in pairs if a != b)]

    left = [task_id for _, task_id in candidates if task_id not in got]
    if left:
        best_left, worst_taken = min(left, key=full), max(got, key=full)
        if full(best_left) < full(worst_taken):
            return (
                f"{op} took {worst_taken!r} while {best_left!r} was available and comes "
                f"first by {why(best_left, worst_taken)}"
            )
    for first, second in itertools.pairwise(got):
        if full(first) > full(second):
            return (
                f"{op} returned tasks out of order: {second!r} must come before {first!r} "
                f"by {why(second, first)}"
            )
    return f"{op} did not return what the model expects"
