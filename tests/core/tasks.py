"""Module-level tasks the core tests enqueue and run (a worker finds tasks by import path)."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime

from threadmill_core import ExponentialBackoff, TaskContext, TaskResult, task
from threadmill_core.backend import Backend
from threadmill_core.models import Lease
from threadmill_core.retry import no_retry

calls: list[tuple[str, object]] = []
calls_lock = threading.Lock()
release = threading.Event()
started = threading.Event()


def record_call(name: str, value: object) -> None:
    with calls_lock:
        calls.append((name, value))


@task
def echo(value: object) -> object:
    record_call("echo", value)
    return value


@task(retry=no_retry)
def final(value: object) -> object:
    """`echo` with every failure final, an expired lease too (the default retries that)."""
    record_call("final", value)
    return value


@task
def nap(seconds: float) -> None:
    time.sleep(seconds)


@task(queue="other", priority=5)
def add(a: int, b: int) -> int:
    return a + b


@task(retry=ExponentialBackoff(base_delay=10, factor=2, max_retries=3, jitter=0))
def flaky(context: TaskContext, fail_times: int) -> str:
    """Fail with ConnectionError on the first `fail_times` attempts."""
    if context.attempt <= fail_times:
        raise ConnectionError(f"attempt {context.attempt} failed")
    return f"ok after {context.attempt}"


@task(retry=ExponentialBackoff(base_delay=1, max_retries=2, jitter=0, retry_on=[ConnectionError]))
def wrong_kind() -> None:
    raise KeyError("not retried: not a ConnectionError")


@task
async def async_double(value: int) -> int:
    await asyncio.sleep(0)
    return value * 2


@task
def returns_datetime() -> object:
    return datetime(2030, 1, 1, tzinfo=UTC)


@task
def report_context(context: TaskContext) -> dict[str, object]:
    return {"attempt": context.attempt, "token": context.token, "id": context.record.id}


# No retry: the tests that let its lease expire see the reaper's decision as final.
@task(retry=no_retry)
def wait_for_release(context: TaskContext) -> bool:
    """Block until the test sets `release`; returns whether the lease was lost meanwhile."""
    started.set()
    release.wait(timeout=30)
    return context.lease_lost


@task(retry=no_retry)
def wait_for_release_without_context() -> bool:
    """`wait_for_release` for a task that takes no context: it cannot know of a lost lease."""
    started.set()
    release.wait(timeout=30)
    return True


@task
def exits(code: object) -> None:
    """``sys.exit(code)`` in a task."""
    raise SystemExit(code)


@task
def interrupts() -> None:
    """A KeyboardInterrupt raised by task code itself."""
    raise KeyboardInterrupt("from the task")


@task
async def cancelled() -> None:
    """An asyncio.CancelledError that escapes the coroutine."""
    raise asyncio.CancelledError("cancelled inside the task")


@task(retry=ExponentialBackoff(base_delay=10, max_retries=1, jitter=0))
def exits_then_succeeds(context: TaskContext) -> str:
    """SystemExit on the first attempt, which its retry policy retries."""
    if context.attempt == 1:
        raise SystemExit(3)
    return "second time lucky"


@task
def takes_anything(*args: object, **kwargs: object) -> list[object]:
    """Any call fits; returns what it got."""
    return [list(args), kwargs]


#: The backend `gives_itself_back` calls (its test sets it), and what `release` answered.
release_backend: list[Backend] = []
gave_back: list[TaskResult | None] = []


@task
def gives_itself_back(context: TaskContext) -> None:
    """Try to give its own claim back (`release`, refused once its start is recorded)."""
    lease = Lease(token=context.token, deadline=datetime.now(UTC), record=context.record)
    gave_back.extend(release_backend[0].release([lease]))


@task(retry=no_retry)
def raises_undecodable_text() -> None:
    """Fails as code that names a file of a non-UTF-8 disk does: a lone surrogate in its text."""
    raise FileNotFoundError("no such file: " + b"report-\xff.txt".decode(errors="surrogateescape"))


@task(retry=no_retry)
def reports_undecodable_progress(context: TaskContext) -> str:
    """Reports progress naming a file of a non-UTF-8 disk: a lone surrogate in its message."""
    context.progress(1, 2, "reading " + b"report-\xff.txt".decode(errors="surrogateescape"))
    return "read"


class Unprintable(Exception):
    """An exception whose text cannot be read: its __str__ raises."""

    def __str__(self) -> str:
        raise RuntimeError("no text for this exception")


@task(retry=no_retry)
def raises_unprintable() -> None:
    """Fails with an exception whose str() raises."""
    raise Unprintable
