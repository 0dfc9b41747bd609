"""Tasks for the ``--log-format json`` test: one logs, one logs an exception, one fails."""

from __future__ import annotations

import logging

from threadmill_core import task
from threadmill_core.retry import no_retry

log = logging.getLogger("tests.worker.logging_tasks")


@task(queue="logs")
def chatty(n: int) -> int:
    """Log one line from inside the task, with a field of its own."""
    log.info("working on %d", n, extra={"n": n})
    return n


@task(queue="logs")
def caught() -> None:
    """Log an exception the task caught."""
    try:
        raise ValueError("a caught problem")
    except ValueError:
        log.exception("caught it")


@task(queue="logs", retry=no_retry)
def broken() -> None:
    """Fail for good: the worker logs the failure as a task event."""
    raise RuntimeError("broken on purpose")
