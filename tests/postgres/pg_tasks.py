"""Tasks for the PostgreSQL fault tests; runs and acknowledgements are logged in a table.

A run inserts ``start:<n>:<pid>:<attempt>`` before its work and
``end:<n>:<pid>:<attempt>`` after it; a plugin hook inserts ``acked:<n>:<pid>``
once the worker's acknowledgement has landed. They go to the table
``threadmill_test_log`` of the database at ``log_url`` (the session's
database on the shared server, which no test restarts), under the test's
tag, in the order they were committed, so the tests can tell whether a task
ran again after it was acknowledged.
"""

from __future__ import annotations

import os
import random
import threading
import time
from datetime import timedelta

import psycopg

from threadmill_core import ExponentialBackoff, TaskContext, TaskResult, hookimpl, task
from threadmill_core.plugins import plugin_manager

#: Expired leases are retried quickly and forever: no fault may turn into a FAILED task.
RETRY = ExponentialBackoff(base_delay=timedelta(milliseconds=50), max_retries=None, jitter=0)

TABLE = "threadmill_test_log"
CREATE = f"CREATE TABLE IF NOT EXISTS {TABLE} (at bigserial PRIMARY KEY, tag text, event text)"

_connections: dict[tuple[str, int], psycopg.Connection[tuple[object, ...]]] = {}
_lock = threading.Lock()


def log_event(log_url: str, tag: str, event: str) -> None:
    """Append `event` under `tag`, on a connection of this thread's own (committed at once)."""
    key = (log_url, threading.get_ident())
    with _lock:
        conn = _connections.get(key)
    if conn is None or conn.closed:
        conn = psycopg.connect(log_url, autocommit=True)
        with _lock:
            _connections[key] = conn
    conn.execute(f"INSERT INTO {TABLE} (tag, event) VALUES (%s, %s)", (tag, event))


def read_events(log_url: str, tag: str) -> list[str]:
    with psycopg.connect(log_url, autocommit=True) as conn:
        rows = conn.execute(f"SELECT event FROM {TABLE} WHERE tag = %s ORDER BY at", (tag,))
        return [event for (event,) in rows]


@task(retry=RETRY)
def work(context: TaskContext, log_url: str, tag: str, n: int, max_ms: int) -> int:
    """Sleep 0..max_ms milliseconds, recording start and end; returns `n`."""
    log_event(log_url, tag, f"start:{n}:{os.getpid()}:{context.attempt}")
    time.sleep(random.uniform(0, max_ms) / 1000)
    log_event(log_url, tag, f"end:{n}:{os.getpid()}:{context.attempt}")
    return n


class AckRecorder:
    """Records each acknowledgement of `work` that landed (the worker calls this hook after it)."""

    @hookimpl
    def threadmill_task_finished(self, record: TaskResult) -> None:
        if record.task_path == work.path:
            log_url, tag, n, _max_ms = record.args
            log_event(log_url, tag, f"acked:{n}:{os.getpid()}")


if plugin_manager().get_plugin("threadmill-postgres-fault-tests") is None:
    plugin_manager().register(AckRecorder(), name="threadmill-postgres-fault-tests")


@task
def echo(n: int) -> int:
    """Return `n` (a task that always succeeds)."""
    return n
