"""What the named scenarios share: records and decisions as a worker makes them, and checks.

Every helper that finds the backend breaking a rule raises
`ProtocolViolation` through `expect`, naming the rule.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import attrs

from threadmill_core.backend import Backend
from threadmill_core.models import (
    JSON,
    Lease,
    TaskError,
    TaskResult,
    TaskResultStatus,
)
from threadmill_core.testing.harness import Harness
from threadmill_core.testing.model import ProtocolViolation

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


def mark(backend: Backend, *leases: Lease) -> None:
    """Record that the tasks of `leases` started, and insist every mark is taken."""
    answers = backend.mark_started(list(leases))
    expect(
        answers == [True] * len(leases),
        "mark_started() must take a current worker lease on a RUNNING task",
        [True] * len(leases),
        answers,
    )


def start_one(
    backend: Backend, task_id: str, *, queue: str = "default", worker: str = "w1"
) -> Lease:
    """`claim_one`, then record that the task started: a claim its expiry charges."""
    lease = claim_one(backend, task_id, queue=queue, worker=worker)
    mark(backend, lease)
    return lease


def reap(harness: Harness, task_id: str) -> Lease:
    """Let every lease expire, then make a reaper claim and insist it is on `task_id` alone.

    The task's claim must be one whose expiry is charged (see `start_one`):
    an unstarted one goes back to READY instead.
    """
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


def registering(catalogue: dict[str, Scenario]) -> Callable[[Scenario], Scenario]:
    """A decorator that adds a scenario to `catalogue` under its function's name."""

    def scenario(function: Scenario) -> Scenario:
        catalogue[function.__name__] = function
        return function

    return scenario
