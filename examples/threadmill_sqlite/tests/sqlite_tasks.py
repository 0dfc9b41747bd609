"""Tasks for the multi-process tests; imported by the test and by the worker processes."""

from __future__ import annotations

import sys
import threading

from threadmill_core import ExponentialBackoff, TaskContext, task

#: Retry an expired lease (or any failure) once, at once.
RETRY_ONCE = ExponentialBackoff(base_delay=0, max_delay=0, max_retries=1, jitter=0)


@task(retry=RETRY_ONCE)
def hang_on_first_attempt(context: TaskContext, label: str) -> str:
    """Attempt 1 says "started" on stdout and never returns (its process gets killed)."""
    if context.attempt == 1:
        print(f"started {context.record.id}", file=sys.stdout, flush=True)
        threading.Event().wait()
    return f"{label} done on attempt {context.attempt}"


@task
def add(a: int, b: int) -> int:
    """A plain task for the supervisor test."""
    return a + b
