"""Test support: conformance-kit harnesses on a fresh namespace, and clocks a test can move.

Every statement reads time from ``{schema}.now_ms()``, the one clock
function of a namespace (see ``sql/v1.sql``). `install_clock` replaces that
function in a test's own namespace with one that reads a row the test
moves, so nothing else under test differs from what ships:

- exact: the clock is the row alone, moved only by `advance`; the kit
  compares every timestamp (``exact_clock=True``);
- shifted: the database's clock plus an offset that `advance` grows; time
  flows in real time too, as in production (``exact_clock=False``).

No URL or option reaches this: the shipped schema's function reads the
database's clock, and only this module replaces it. The row lives in the
namespace, so every process on it sees the same moved time, which is what a
test of "time passed for the reaper, not for the dead worker" wants.

`make_harness` also offers the kit's `Harness.corruptions`: `CORRUPTIONS`,
each a value the schema accepts but no valid record holds, set by `corrupt`.
"""

from __future__ import annotations

import functools
import uuid
from datetime import timedelta
from typing import Any

import psycopg

from threadmill_core.clock import duration_ms
from threadmill_core.models import TaskResultStatus
from threadmill_core.testing import Harness
from threadmill_postgres.backend import PostgresBackend
from threadmill_postgres.schema import quote_ident

_EXACT = "SELECT ms FROM {s}.test_clock"
_SHIFTED = (
    "SELECT floor(extract(epoch FROM now()) * 1000)::bigint"
    " + (SELECT offset_ms FROM {s}.test_clock)"
)


def new_namespace(prefix: str = "threadmill_test") -> str:
    """A namespace no other test uses."""
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


def install_clock(backend: PostgresBackend, *, exact: bool) -> None:
    """Make `backend`'s namespace read a clock that `advance` moves (see the module doc).

    The exact clock starts at the database's clock, in whole milliseconds.
    """
    s = quote_ident(backend.namespace)
    body = (_EXACT if exact else _SHIFTED).replace("{s}", s)
    with psycopg.connect(backend.conninfo, autocommit=True) as conn, conn.transaction():
        conn.execute(f"CREATE TABLE {s}.test_clock (ms bigint NOT NULL, offset_ms bigint NOT NULL)")
        conn.execute(
            f"INSERT INTO {s}.test_clock SELECT floor(extract(epoch FROM now()) * 1000)::bigint, 0"
        )
        conn.execute(
            f"CREATE OR REPLACE FUNCTION {s}.now_ms() RETURNS bigint "
            f"LANGUAGE sql STABLE AS $$ {body} $$"
        )


def advance(backend: PostgresBackend, delta: timedelta) -> None:
    """Move the clock `install_clock` put in `backend`'s namespace forward by `delta`."""
    if delta < timedelta(0):
        raise ValueError(f"time only moves forward; got {delta}")
    ms = duration_ms(delta)
    s = quote_ident(backend.namespace)
    with psycopg.connect(backend.conninfo, autocommit=True) as conn:
        conn.execute(
            f"UPDATE {s}.test_clock SET ms = ms + %(ms)s, offset_ms = offset_ms + %(ms)s",
            {"ms": ms},
        )


def drop_namespace(backend: PostgresBackend) -> None:
    """Close `backend`, then drop its namespace's schema and everything in it."""
    backend.close()
    with psycopg.connect(backend.conninfo, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {quote_ident(backend.namespace)} CASCADE")


def make_harness(url: str, *, result_ttl: timedelta, exact: bool = True, **options: Any) -> Harness:
    """A harness on a new namespace of the database `url` names, on a clock `advance` moves.

    `close()` closes the backend and drops the namespace.
    """
    backend = PostgresBackend.from_url(
        url, namespace=new_namespace(), result_ttl=result_ttl, **options
    )
    try:
        install_clock(backend, exact=exact)
    except BaseException:
        drop_namespace(backend)
        raise
    return Harness(
        backend=backend,
        advance=lambda delta: advance(backend, delta),
        exact_clock=exact,
        close=lambda: drop_namespace(backend),
        result_ttl=result_ttl,
        corruptions={name: functools.partial(corrupt, backend, name=name) for name in CORRUPTIONS},
    )


#: The damage `corrupt` can do to a stored task, by name: the column it sets and
#: the value, one the schema accepts but no valid record has.
CORRUPTIONS: dict[str, tuple[str, object]] = {
    "payload garbled": ("payload", b"\xff not a record"),
    "timestamp out of range": ("enqueued_at", 2**62),
    "due time out of range": ("run_after", 2**62),
    "priority out of range": ("priority", 32000),
}


def corrupt(backend: PostgresBackend, task_id: str, *, name: str) -> None:
    """Damage the stored row of task `task_id` as `CORRUPTIONS[name]` says (a harness corruption).

    Uses a connection of its own, as a hand edit would; `LookupError` if the
    task is not stored.
    """
    column, value = CORRUPTIONS[name]
    s = quote_ident(backend.namespace)
    with psycopg.connect(backend.conninfo, autocommit=True) as conn:
        cursor = conn.execute(
            f"UPDATE {s}.tasks SET {column} = %(value)s WHERE id = %(id)s",
            {"value": value, "id": task_id},
        )
        if cursor.rowcount != 1:
            raise LookupError(f"no task {task_id!r} in namespace {backend.namespace!r}")


def plant_raw(
    backend: PostgresBackend,
    task_id: str,
    *,
    payload: bytes | None = None,
    errors: bytes | None = None,
    result: bytes | None = None,
) -> None:
    """Overwrite stored bytes of a task, as disk corruption or a foreign writer would.

    Columns left None keep their bytes. Uses a connection of its own, as an
    outside writer would; the backend never writes raw bytes.
    """
    changes = {
        name: value
        for name, value in (("payload", payload), ("errors", errors), ("return_value", result))
        if value is not None
    }
    if not changes:
        return
    s = quote_ident(backend.namespace)
    assignments = ", ".join(f"{name} = %({name})s" for name in changes)
    with psycopg.connect(backend.conninfo, autocommit=True) as conn:
        cursor = conn.execute(
            f"UPDATE {s}.tasks SET {assignments} WHERE id = %(id)s", {**changes, "id": task_id}
        )
        if cursor.rowcount != 1:
            raise LookupError(f"no task {task_id!r} in namespace {backend.namespace!r}")


def status_of(backend: PostgresBackend, task_id: str) -> TaskResultStatus | None:
    """A task's status from its column, without decoding its bytes (None if absent)."""
    s = quote_ident(backend.namespace)
    with psycopg.connect(backend.conninfo, autocommit=True) as conn:
        row = conn.execute(f"SELECT status FROM {s}.tasks WHERE id = %s", (task_id,)).fetchone()
    return None if row is None else TaskResultStatus(row[0])


def start_recorded(backend: PostgresBackend, task_id: str) -> bool:
    """Whether the task's current claim has its start recorded (`Backend.mark_started`).

    Read from its column by a connection of its own (False if absent), for
    tests that must know a worker's heartbeat thread has marked a task
    before they kill it.
    """
    s = quote_ident(backend.namespace)
    with psycopg.connect(backend.conninfo, autocommit=True) as conn:
        row = conn.execute(
            f"SELECT started AND status = 'RUNNING' FROM {s}.tasks WHERE id = %s", (task_id,)
        ).fetchone()
    return row is not None and bool(row[0])
