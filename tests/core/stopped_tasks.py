"""Tasks that run too long, are cancelled while they run, or report progress.

Each records what happened to it in `events` (its ``finally`` blocks too),
so a test can tell that the task stopped cleanly. `gate` holds the tasks
that wait for the test.
"""

from __future__ import annotations

import asyncio
import threading
import time

from threadmill_core import TaskContext, task

events: list[str] = []
events_lock = threading.Lock()
#: Set by a test to let the tasks that wait on it end.
gate = threading.Event()
#: Set by `progressing` once it has reported, for the test to look.
reported = threading.Event()
#: The lease token of each `waits` run, by task id: a test sends a late acknowledgement.
tokens: dict[str, str] = {}


def note(event: str) -> None:
    with events_lock:
        events.append(event)


def seen(event: str) -> bool:
    with events_lock:
        return event in events


@task(time_limit=1)
def spins() -> None:
    """Loops in Python for ever: the soft limit stops it."""
    note("spins:start")
    try:
        while True:
            pass
    finally:
        note("spins:finally")


@task(time_limit=1)
def sleeps() -> None:
    """Blocked in C for ten minutes: only the hard limit stops it."""
    note("sleeps:start")
    try:
        time.sleep(600)
    finally:
        note("sleeps:finally")


@task(time_limit=1)
async def awaits() -> None:
    """Awaits for ever: cancelled on its loop at the soft limit."""
    note("awaits:start")
    try:
        await asyncio.Event().wait()
    finally:
        note("awaits:finally")


@task
def neighbour(seconds: float) -> str:
    """A well-behaved task that runs beside the others."""
    note("neighbour:start")
    time.sleep(seconds)
    note("neighbour:end")
    return "fine"


@task
def unlimited(seconds: float) -> str:
    """No limit of its own: the worker's default (or a call's) decides."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.01)
    return "done"


@task
def waits(context: TaskContext) -> str:
    """Waits for the gate in short sleeps, so a cancel is raised in it promptly."""
    assert context.token is not None
    tokens[context.record.id] = context.token
    note("waits:start")
    try:
        while not gate.is_set():
            time.sleep(0.01)
        return "released"
    finally:
        note(f"waits:finally:{context.cancel_requested}")


@task
def progressing(context: TaskContext, steps: int) -> int:
    """Reports progress, then waits for the gate before the last step."""
    for done in range(steps):
        context.progress(done, steps, f"step {done}")
    reported.set()
    while not gate.is_set():
        time.sleep(0.01)
    context.progress(steps, steps, "all done")
    return steps


@task
def reports(context: TaskContext, done: object, total: object, message: object) -> str:
    """Reports the progress it is given; says what the call raised, if anything."""
    try:
        context.progress(done, total, message)  # type: ignore[arg-type]  # bad input on purpose
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok"
