"""`enqueue_calls`: every promise of `enqueue`, for the records `call_record` makes.

`Broker.enqueue` and `Broker.enqueue_many` store through `enqueue_calls`,
and a backend may override it to write what the calls share once per batch
(the Redis backend does); the state machine drives `enqueue` only, so these
scenarios hold an override to the same rules: stored in the order given,
READY or DEFERRED by the template's `run_after`, idempotent on id (a stored
id, and an id given twice in one call, answered by the stored record), the
template's own id and arguments ignored, and the backend's fields its own.
"""

from __future__ import annotations

from datetime import timedelta

import attrs

from threadmill_core.models import TaskCall, TaskResult, TaskResultStatus, call_record
from threadmill_core.testing._scenarios.kit import (
    DEFERRED,
    LEASE_TTL,
    PAST_A_LEASE,
    READY,
    Scenario,
    expect,
    failure,
    new_task,
    registering,
)
from threadmill_core.testing.harness import Harness

#: This module's scenarios, by name (`threadmill_core.testing.scenarios.SCENARIOS` holds all).
SCENARIOS: dict[str, Scenario] = {}
scenario = registering(SCENARIOS)

#: The fields `enqueue` takes from the caller (see `Backend.enqueue`).
CALLER_FIELDS = (
    "id",
    "task_path",
    "args",
    "kwargs",
    "queue",
    "priority",
    "run_after",
    "retry",
    "headers",
    "time_limit",
)


def _as_enqueued(
    what: str, expected: TaskResult, got: TaskResult, status: TaskResultStatus
) -> None:
    """`got` is `expected` as `enqueue` stores it: the caller's fields, status, nothing else."""
    for name in CALLER_FIELDS:
        expect(
            getattr(got, name) == getattr(expected, name),
            f"{what} must store the call's {name} as `call_record` makes it (task {expected.id!r})",
            getattr(expected, name),
            getattr(got, name),
        )
    owned = (
        got.status,
        got.attempts,
        got.errors,
        got.worker_ids,
        got.started_at,
        got.finished_at,
        got.return_value,
        got.progress,
        got.cancel_requested_at,
    )
    expect(
        owned == (status, 0, (), (), None, None, None, None, None) and got.enqueued_at is not None,
        f"{what} must store a new task as enqueue() does: {status.value}, no attempt, no "
        f"error, no worker, no timestamp but enqueued_at (task {expected.id!r})",
        f"{status.value}, attempts 0, nothing else set",
        got,
    )


@scenario
def enqueue_calls_keeps_every_promise_of_enqueue(harness: Harness) -> None:
    """enqueue_calls() stores each call in order, idempotent on id (a stored id and an id given
    twice answered by the stored record), the template's own id and arguments ignored."""
    backend = harness.backend
    [known] = backend.enqueue([new_task("known", priority=5, args=["first"])])
    template = attrs.evolve(
        new_task("template", priority=5, args=["template's"], kwargs={"t": 1}),
        headers={"trace": "abc"},
        time_limit=timedelta(seconds=30),
        # Fields enqueue() ignores, which the template may carry too.
        status=TaskResultStatus.SUCCESSFUL,
        attempts=7,
        errors=(failure("junk"),),
        worker_ids=("junk",),
    )
    calls: list[TaskCall] = [
        ("a", [1, "x"], {"k": [2]}),
        ("known", ["second"], {}),
        ("b", [], {}),
        ("a", ["again"], {}),
    ]
    got = backend.enqueue_calls(template, calls)
    expect(
        isinstance(got, list) and [r.id for r in got] == ["a", "known", "b", "a"],
        "enqueue_calls() must answer one record per call, in the order given",
        ["a", "known", "b", "a"],
        [getattr(r, "id", r) for r in got] if isinstance(got, list) else got,
    )
    _as_enqueued("enqueue_calls()", call_record(template, calls[0]), got[0], READY)
    _as_enqueued("enqueue_calls()", call_record(template, calls[2]), got[2], READY)
    expect(
        got[1] == known,
        "enqueue_calls() of a stored id must store nothing and answer the stored record",
        known,
        got[1],
    )
    expect(
        got[3] == got[0],
        "enqueue_calls() of an id given twice must store the first call and answer it for both",
        got[0],
        got[3],
    )
    for record in got:
        expect(
            backend.get(record.id) == record,
            "enqueue_calls() must answer the records as stored (get() reads them back)",
            record,
            backend.get(record.id),
        )
    expect(
        backend.get("template") is None,
        "enqueue_calls() must not store the template itself (its id is ignored)",
        None,
        backend.get("template"),
    )
    leases = backend.claim(["default"], worker="w1", lease_ttl=LEASE_TTL, limit=10)
    order = [lease.task_id for lease in leases]
    expect(
        order == ["known", "a", "b"],
        "enqueue_calls() must store its calls at the READY tail, in the order given",
        ["known", "a", "b"],
        order,
    )


@scenario
def enqueue_calls_defers_by_the_templates_run_after(harness: Harness) -> None:
    """enqueue_calls() with a template due later stores every call DEFERRED until then."""
    backend = harness.backend
    later = backend.now() + timedelta(minutes=1)
    template = new_task("template", run_after=later)
    calls: list[TaskCall] = [("d2", [2], {}), ("d1", [1], {})]
    got = backend.enqueue_calls(template, calls)
    for call, record in zip(calls, got, strict=True):
        _as_enqueued("enqueue_calls() due later", call_record(template, call), record, DEFERRED)
    early = backend.claim(["default"], worker="w1", lease_ttl=LEASE_TTL, limit=10)
    expect(
        early == [],
        "enqueue_calls() due later must not be claimable before run_after",
        [],
        [lease.task_id for lease in early],
    )
    harness.advance(PAST_A_LEASE)
    leases = backend.claim(["default"], worker="w1", lease_ttl=LEASE_TTL, limit=10)
    order = [lease.task_id for lease in leases]
    expect(
        order == ["d1", "d2"],
        "deferred calls with one run_after must fall due together, in DEFERRED order (by id)",
        ["d1", "d2"],
        order,
    )
