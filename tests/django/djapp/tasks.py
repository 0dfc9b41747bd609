"""Django tasks for the unit tests: plain ``@django.tasks.task`` functions (and threadmill's)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from django.db import connection
from django.tasks import TaskContext, task

import threadmill_django
from threadmill_core import ExponentialBackoff

#: What the tasks saw, in order (the tests run workers in their own process).
RUNS: list[Any] = []


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def echo(*args: Any, **kwargs: Any) -> list[Any]:
    return [list(args), kwargs]


@task(queue_name="high")
def note(label: str) -> None:
    RUNS.append(label)


@task
def note_default(label: str) -> None:
    RUNS.append(label)


def backoff(context: TaskContext) -> timedelta | None:
    """A retry callback of the earlier backend's kind: it reads Django's context."""
    error = context.task_result.errors[-1]
    RUNS.append(("policy", type(context), context.attempt, error.exception_class_path))
    return timedelta(seconds=10) if context.attempt < 3 else None


@threadmill_django.task(takes_context=True, retry=backoff)
def flaky(context: TaskContext, succeed_on: int) -> int:
    RUNS.append(("run", context.attempt, context.task_result.status))
    if context.attempt < succeed_on:
        raise ValueError(f"attempt {context.attempt} fails")
    return context.attempt


@threadmill_django.task(retry=ExponentialBackoff(base_delay=5, max_retries=1, jitter=0))
def always_fails() -> None:
    raise RuntimeError("never works")


@threadmill_django.task(retry=backoff, lease_ttl=60)
def abandoned() -> None:
    """Claimed by a 'worker' that dies in the tests; never really run."""


@task(takes_context=True)
def context_facts(context: TaskContext) -> dict[str, Any]:
    context.task_result.refresh()
    return {
        "type": f"{type(context).__module__}.{type(context).__qualname__}",
        "id": context.task_result.id,
        "status": str(context.task_result.status),
        "attempt": context.attempt,
        "token": bool(context.token),  # type: ignore[attr-defined]
        "lease_lost": context.lease_lost,  # type: ignore[attr-defined]
    }


@task
def exits(code: Any) -> None:
    raise SystemExit(code)


@task
def interrupts() -> None:
    raise KeyboardInterrupt("from the task")


@task
def returns_a_lambda() -> Any:
    return lambda: True


@task
async def sleeps_then_returns(value: int) -> int:
    await asyncio.sleep(0.001)
    return value


@task
def uses_the_database() -> bool:
    """Whether this thread's connection was closed after the task before (CONN_MAX_AGE 0)."""
    was_closed = connection.connection is None
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    RUNS.append(("db", was_closed))
    return was_closed


@task(takes_context=True)
def fails_first_time(context: TaskContext, label: str) -> str:
    """For the admin's tests: FAILED at its first attempt (no retry), then, requeued, done."""
    if context.attempt == 1:
        raise LookupError(f"{label}: the first attempt always fails")
    return label


@task(takes_context=True)
def remember_tick(context: TaskContext) -> None:
    """Records the schedule and tick its run came from (see test_periodic.py)."""
    from threadmill_core import tick_of

    RUNS.append(tick_of(context))


def send_digest() -> str:
    """Made a task of the ``emails`` alias by the tests that configure one (test_periodic.py)."""
    return "sent"
