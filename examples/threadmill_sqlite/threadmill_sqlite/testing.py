"""Test support: conformance-kit harnesses, and backends whose time a test can move.

`SQLiteBackend` reads time only in `_read_clock`, from SQLite, inside each
transaction. The two subclasses here replace that one method, so everything
else under test is the shipped code:

- `ShiftedClockBackend` reads SQLite's clock exactly as shipped and adds an
  offset that `advance` moves forward. Time also flows in real time, as in
  production; the kit checks it with ``exact_clock=False``.
- `FakeClockBackend` reads a `threadmill_core.clock.FakeClock` instead, so
  its timestamps are exactly the kit's model clock (``exact_clock=True``),
  which lets the kit compare every timestamp and stop on due moments.

Neither is reachable from a ``sqlite://`` URL: the plugin builds only
`SQLiteBackend`, which has no offset and no clock argument. The offset lives
in the one process (and backend object) that a test moves; other processes on
the same file read the real clock, which is what a test of "time passed for
the reaper, not for the dead worker" wants.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from threadmill_core.clock import FakeClock, duration_ms, to_ms
from threadmill_core.models import TaskResultStatus
from threadmill_core.testing import Harness

from threadmill_sqlite.backend import SQLiteBackend


class ShiftedClockBackend(SQLiteBackend):
    """Test support: SQLite's clock, read as shipped, plus an offset moved by `advance`."""

    def __init__(self, path: str | os.PathLike[str], **options: Any) -> None:
        self._offset_ms = 0
        self._offset_lock = threading.Lock()
        super().__init__(path, **options)

    def advance(self, delta: timedelta) -> None:
        """From now on, this backend object's clock reads `delta` later (never earlier)."""
        if delta < timedelta(0):
            raise ValueError(f"time only moves forward; got {delta}")
        with self._offset_lock:
            self._offset_ms += duration_ms(delta)

    def _read_clock(self, conn: sqlite3.Connection) -> int:
        with self._offset_lock:
            offset = self._offset_ms
        return super()._read_clock(conn) + offset


class FakeClockBackend(SQLiteBackend):
    """Test support: time is `clock` (a `FakeClock`), not SQLite's."""

    def __init__(self, path: str | os.PathLike[str], *, clock: FakeClock, **options: Any) -> None:
        self.clock = clock
        super().__init__(path, **options)

    def _read_clock(self, conn: sqlite3.Connection) -> int:
        return to_ms(self.clock.now())


def make_harness(*, result_ttl: timedelta, exact: bool = False) -> Harness:
    """A conformance-kit harness on a new database file in a new temporary folder.

    `exact` picks `FakeClockBackend` (timestamps follow the kit's model
    clock); otherwise `ShiftedClockBackend` (SQLite's clock, shifted).
    Both use ``synchronous="normal"``: the kit checks what each operation
    does, not whether it survives a power cut, and disk flushes would
    dominate its run time. `close()` closes the backend and deletes the folder.
    """
    folder = Path(tempfile.mkdtemp(prefix="threadmill-sqlite-"))
    path = folder / "queue.db"
    backend: SQLiteBackend
    advance: Callable[[timedelta], None]
    if exact:
        clock = FakeClock()
        backend = FakeClockBackend(path, clock=clock, result_ttl=result_ttl, synchronous="normal")
        advance = clock.advance
    else:
        shifted = ShiftedClockBackend(path, result_ttl=result_ttl, synchronous="normal")
        backend, advance = shifted, shifted.advance

    def close() -> None:
        backend.close()
        shutil.rmtree(folder, ignore_errors=True)

    return Harness(
        backend=backend,
        advance=advance,
        exact_clock=exact,
        close=close,
        result_ttl=result_ttl,
        # Columns are typed and checked, so the one corrupt shape a row can
        # hold is bytes that do not decode (which the backend quarantines).
        corruptions={
            "payload garbled": lambda task_id: plant_raw(backend, task_id, payload=b"{not a record")
        },
    )


def plant_raw(
    backend: SQLiteBackend,
    task_id: str,
    *,
    payload: bytes | None = None,
    errors: bytes | None = None,
    worker_ids: bytes | None = None,
) -> None:
    """Overwrite stored bytes of an existing task, as disk corruption or a foreign writer would.

    Columns left as None keep their bytes. Opens its own connection, as an
    outside writer does; the backend's own code never writes raw bytes.
    """
    changes = {
        name: value
        for name, value in (("payload", payload), ("errors", errors), ("worker_ids", worker_ids))
        if value is not None
    }
    if not changes:
        return
    with sqlite3.connect(backend.path, isolation_level=None) as conn:
        assignments = ", ".join(f"{name} = ?" for name in changes)
        cursor = conn.execute(
            f"UPDATE threadmill_tasks SET {assignments} WHERE id = ?", (*changes.values(), task_id)
        )
        if cursor.rowcount != 1:
            raise LookupError(f"no task {task_id!r} in {backend.path}")
    conn.close()


def status_of(backend: SQLiteBackend, task_id: str) -> TaskResultStatus | None:
    """A task's status straight from its column, without decoding its bytes (None if absent)."""
    with sqlite3.connect(backend.path) as conn:
        row = conn.execute(
            "SELECT status FROM threadmill_tasks WHERE id = ?", (task_id,)
        ).fetchone()
    conn.close()
    return None if row is None else TaskResultStatus(row[0])


def start_recorded(backend: SQLiteBackend, task_id: str) -> bool:
    """Whether the task's current claim has its start recorded (`mark_started`), read
    straight from its column by a connection of its own (False if absent)."""
    with sqlite3.connect(backend.path) as conn:
        row = conn.execute("SELECT claim FROM threadmill_tasks WHERE id = ?", (task_id,)).fetchone()
    conn.close()
    return row is not None and row[0] == "started"
