"""What every operation of `SQLiteBackend` stands on: its transactions, its clock, shared steps.

`Transactions._write` and `._read` open a transaction and read the clock
once inside it, through `_read_clock`, the only method that reads time;
every deadline and timestamp an operation writes is that reading plus a
duration. The steps below them (a row by id, the entered-READY sequence,
quarantine, telemetry, giving a claim back, promoting due tasks) run inside
the caller's transaction. The backend's jobs (`_working`, `_maintenance`,
`_inspection`) build on this class; `SQLiteBackend.__init__` sets its attributes.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence

from threadmill_core.backend import RATE_HISTORY
from threadmill_core.clock import duration_ms
from threadmill_core.errors import PayloadError
from threadmill_core.models import TaskResult, TaskResultStatus

from threadmill_sqlite import _rows
from threadmill_sqlite._database import Database

log = logging.getLogger("threadmill_sqlite")

READY = TaskResultStatus.READY
DEFERRED = TaskResultStatus.DEFERRED
RUNNING = TaskResultStatus.RUNNING
SUCCESSFUL = TaskResultStatus.SUCCESSFUL
FAILED = TaskResultStatus.FAILED
CANCELLED = TaskResultStatus.CANCELLED

#: SQLite's clock as integer milliseconds since the Unix epoch. ``julianday('now')``
#: is SQLite's reading of the system clock (whole milliseconds, the same for a
#: whole statement); ROUND undoes the floating-point error of the conversion.
NOW_MS_SQL = "SELECT CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)"

#: Each segment's order, as ORDER BY (the protocol's segment orders).
SEGMENT_ORDER: Mapping[TaskResultStatus, str] = {
    READY: "priority DESC, ready_seq",
    DEFERRED: "run_after, id",
    RUNNING: "deadline, id",
    SUCCESSFUL: "finished_at, id",
    FAILED: "finished_at, id",
    CANCELLED: "finished_at, id",
}

#: A task query: what `_rows.decode` reads, and the lease columns.
SELECT_TASK = (
    f"SELECT {_rows.COLUMNS}, token, deadline, claim, unstarted_expiries FROM threadmill_tasks"
)
#: Rows a read may see: not a result that expired (its `finished_at` <= the cutoff).
VISIBLE = "(finished_at IS NULL OR finished_at > ?)"

#: Telemetry buckets (see `SQLiteBackend.rates`) are this many milliseconds
#: long, and this many are kept per queue.
RATE_BUCKET_MS = 1000
RATE_BUCKETS = -(-duration_ms(RATE_HISTORY) // RATE_BUCKET_MS)


class Transactions:
    """Transactions with their clock reading, and the steps operations share inside them."""

    _db: Database
    _result_ttl_ms: int
    #: Wakes this process's waiters (see `_notify`); `_generation` counts the wake-ups.
    _wake: threading.Condition
    _generation: int
    _closed: bool

    def _read_clock(self, conn: sqlite3.Connection) -> int:
        """The database's clock, in integer milliseconds, read inside the caller's transaction.

        Every operation reads it exactly once, right after its transaction
        began. Only test support overrides this (see `threadmill_sqlite.testing`).
        """
        return int(conn.execute(NOW_MS_SQL).fetchone()[0])

    @contextlib.contextmanager
    def _write(self, doing: str) -> Iterator[tuple[sqlite3.Connection, int]]:
        """A write transaction (``BEGIN IMMEDIATE``) and its clock reading; expired results gone."""
        with self._db.transaction(write=True, doing=doing) as conn:
            now_ms = self._read_clock(conn)
            conn.execute(
                "DELETE FROM threadmill_tasks WHERE finished_at IS NOT NULL AND finished_at <= ?",
                (self._cutoff(now_ms),),
            )
            yield conn, now_ms

    @contextlib.contextmanager
    def _read(self, doing: str) -> Iterator[tuple[sqlite3.Connection, int]]:
        """A read-only snapshot (``BEGIN``) and its clock reading."""
        with self._db.transaction(write=False, doing=doing) as conn:
            yield conn, self._read_clock(conn)

    def _cutoff(self, now_ms: int) -> int:
        """Results finished at or before this have expired."""
        return now_ms - self._result_ttl_ms

    def _row(self, conn: sqlite3.Connection, task_id: str) -> sqlite3.Row | None:
        row: sqlite3.Row | None = conn.execute(f"{SELECT_TASK} WHERE id = ?", (task_id,)).fetchone()
        return row

    def _next_ready_seq(self, conn: sqlite3.Connection, count: int = 1) -> int:
        """Reserve `count` places at the tail of the entered-READY sequence; return the first."""
        (row,) = conn.execute(
            "UPDATE threadmill_meta SET value = value + ? WHERE name = 'ready_seq' RETURNING value",
            (count,),
        ).fetchall()
        return int(row[0]) - count + 1

    def _decode_or_quarantine(
        self, conn: sqlite3.Connection, row: sqlite3.Row, now_ms: int
    ) -> TaskResult | None:
        """The record `row` holds, or None after finalizing undecodable bytes FAILED."""
        try:
            return _rows.decode(row)
        except PayloadError as exc:
            log.warning("quarantining task %r of queue %r: %s", row["id"], row["queue"], exc)
            columns = _rows.quarantine(row, exc, now_ms)
            assignments = ", ".join(f"{name} = ?" for name in columns)
            # No token: a holder of the poisoned task's lease must not take this
            # FAILED record for its own decision, repeated.
            conn.execute(
                f"UPDATE threadmill_tasks SET status = 'FAILED', finished_at = ?, token = NULL, "
                f"deadline = NULL, ready_seq = NULL, {assignments} WHERE id = ?",
                (now_ms, *columns.values(), row["id"]),
            )
            self._count(conn, now_ms, row["queue"], finished=1)
            return None

    def _count(
        self,
        conn: sqlite3.Connection,
        now_ms: int,
        queue: str,
        *,
        entered: int = 0,
        finished: int = 0,
    ) -> None:
        """Add to the telemetry of `queue` inside the caller's write transaction; trim the old."""
        bucket = now_ms // RATE_BUCKET_MS
        conn.execute(
            "INSERT INTO threadmill_rates (bucket, queue, entered, finished) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (bucket, queue) DO UPDATE SET entered = entered + excluded.entered, "
            "finished = finished + excluded.finished",
            (bucket, queue, entered, finished),
        )
        # A range at the start of the key: cheap whether or not anything is that old.
        conn.execute("DELETE FROM threadmill_rates WHERE bucket <= ?", (bucket - RATE_BUCKETS,))

    def _notify(self) -> None:
        """Wake this process's `wait_for_tasks` callers: a task entered READY."""
        with self._wake:
            self._generation += 1
            self._wake.notify_all()

    def _give_back(
        self,
        conn: sqlite3.Connection,
        record: TaskResult,
        expiries: int,
        now_ms: int,
        due_ms: int | None = None,
    ) -> TaskResult:
        """Undo a RUNNING task's claim: READY tail (DEFERRED till `due_ms`, if given),
        attempt and worker undone, token cleared. A task with a cancel request is
        finalized CANCELLED instead (it never goes back)."""
        attempts = max(record.attempts - 1, 0)
        if record.cancel_requested_at is not None:
            place: tuple[str, int] = ("status = 'CANCELLED', finished_at = ?", now_ms)
            self._count(conn, now_ms, record.queue, finished=1)
        elif due_ms is None:
            place = ("status = 'READY', ready_seq = ?", self._next_ready_seq(conn))
        else:
            place = ("status = 'DEFERRED', run_after = ?", due_ms)
        (stored,) = conn.execute(
            f"UPDATE threadmill_tasks SET {place[0]}, token = NULL, "
            "claim = 'unstarted', deadline = NULL, attempts = ?, worker_ids = ?, "
            "unstarted_expiries = ?, "
            "started_at = CASE WHEN ? THEN started_at END, "
            "last_attempted_at = CASE WHEN ? THEN last_attempted_at END "
            f"WHERE id = ? RETURNING {_rows.COLUMNS}",
            (
                place[1],
                attempts,
                _rows.encode_worker_ids(record.worker_ids[:-1]),
                expiries,
                attempts > 0,
                attempts > 0,
                record.id,
            ),
        ).fetchall()
        return _rows.decode(stored)

    def _due(
        self, conn: sqlite3.Connection, now_ms: int, queues: list[str] | None, limit: int = -1
    ) -> list[str]:
        """Ids of the due DEFERRED tasks of `queues` (None: all), in DEFERRED order."""
        where = "" if queues is None else f"AND queue IN ({marks(queues)}) "
        rows = conn.execute(
            f"SELECT id FROM threadmill_tasks WHERE status = 'DEFERRED' AND run_after <= ? "
            f"{where}ORDER BY {SEGMENT_ORDER[DEFERRED]} LIMIT ?",
            (now_ms, *(queues or ()), limit),
        ).fetchall()
        return [row[0] for row in rows]

    def _promote(self, conn: sqlite3.Connection, task_ids: list[str]) -> int:
        """Move these DEFERRED tasks to READY in the order given, without decoding them.

        Their tokens stay: a repeat of the `retry` that deferred a task is
        still recognised once it is READY.
        """
        if task_ids:
            first = self._next_ready_seq(conn, len(task_ids))
            conn.executemany(
                "UPDATE threadmill_tasks SET status = 'READY', ready_seq = ? WHERE id = ?",
                [(first + index, task_id) for index, task_id in enumerate(task_ids)],
            )
        return len(task_ids)


def marks(values: Sequence[object]) -> str:
    """The ``?`` placeholders of an ``IN (...)`` list of `values`."""
    return ", ".join("?" * len(values))


def new_token() -> str:
    """128 random bits: never the same twice, whatever process or task draws it."""
    return secrets.token_hex(16)
