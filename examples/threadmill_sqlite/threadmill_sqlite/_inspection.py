"""`SQLiteBackend`'s reads (get, peek, rates, counts) and operator actions."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from threadmill_core.backend import RATE_HISTORY
from threadmill_core.checks import check_limit, check_offset, check_purgeable, check_window
from threadmill_core.clock import duration_ms
from threadmill_core.models import QueueCounts, QueueRates, TaskResult, TaskResultStatus

from threadmill_sqlite import _rows
from threadmill_sqlite._transactions import (
    RATE_BUCKET_MS,
    RATE_BUCKETS,
    SEGMENT_ORDER,
    SELECT_TASK,
    VISIBLE,
    Transactions,
)

READY = TaskResultStatus.READY
DEFERRED = TaskResultStatus.DEFERRED
RUNNING = TaskResultStatus.RUNNING
FAILED = TaskResultStatus.FAILED
CANCELLED = TaskResultStatus.CANCELLED


class SQLiteInspection(Transactions):
    """`get`, `peek`, `rates`, `counts`, and the operator's `requeue`, `cancel`,
    `request_cancel` and `purge`."""

    def get(self, task_id: str) -> TaskResult | None:
        with self._read("get") as (conn, now_ms):
            row = conn.execute(
                f"{SELECT_TASK} WHERE id = ? AND {VISIBLE}", (task_id, self._cutoff(now_ms))
            ).fetchone()
            return None if row is None else _rows.decode(row)

    def peek(
        self,
        queue: str,
        status: TaskResultStatus,
        *,
        offset: int = 0,
        limit: int = 100,
    ) -> list[TaskResult]:
        status = TaskResultStatus(status)
        check_limit(limit)
        check_offset(offset)
        with self._read("peek") as (conn, now_ms):
            rows = conn.execute(
                f"{SELECT_TASK} WHERE queue = ? AND status = '{status.value}' AND {VISIBLE} "
                f"ORDER BY {SEGMENT_ORDER[status]} LIMIT ? OFFSET ?",
                (queue, self._cutoff(now_ms), limit, offset),
            ).fetchall()
            return [_rows.decode(row) for row in rows]

    def rates(self, window: timedelta) -> Mapping[str, QueueRates] | None:
        """Counted in one-second buckets of the database's clock, kept for an hour."""
        check_window(window)
        count = min(-(-duration_ms(window) // RATE_BUCKET_MS), RATE_BUCKETS)
        with self._read("rates") as (conn, now_ms):
            rows = conn.execute(
                "SELECT queue, SUM(entered), SUM(finished) FROM threadmill_rates "
                "WHERE bucket > ? GROUP BY queue ORDER BY queue",
                (now_ms // RATE_BUCKET_MS - count,),
            ).fetchall()
        covered = min(window, RATE_HISTORY)
        return {
            queue: QueueRates(queue=queue, window=covered, entered=entered, finished=finished)
            for queue, entered, finished in rows
            if entered or finished
        }

    def counts(self) -> Mapping[str, QueueCounts]:
        with self._read("counts") as (conn, now_ms):
            rows = conn.execute(
                f"SELECT queue, status, COUNT(*) FROM threadmill_tasks WHERE {VISIBLE} "
                "GROUP BY queue, status",
                (self._cutoff(now_ms),),
            ).fetchall()
        tallies: dict[str, dict[str, int]] = {}
        for queue, status, count in rows:
            tallies.setdefault(queue, {})[str(status).lower()] = int(count)
        return {queue: QueueCounts(queue=queue, **tallies[queue]) for queue in sorted(tallies)}

    # --- operator actions --------------------------------------------------------------

    def requeue(self, task_id: str) -> TaskResult | None:
        with self._write("requeue") as (conn, now_ms):
            row = self._row(conn, task_id)
            if row is None or row["status"] not in (FAILED.value, CANCELLED.value):
                return None
            _rows.decode(row)  # poison raises before anything changes
            (stored,) = conn.execute(
                "UPDATE threadmill_tasks SET status = 'READY', ready_seq = ?, finished_at = NULL, "
                "return_value = NULL, token = NULL, progress = NULL, cancel_requested_at = NULL "
                f"WHERE id = ? RETURNING {_rows.COLUMNS}",
                (self._next_ready_seq(conn), task_id),
            ).fetchall()
            record = _rows.decode(stored)
            self._count(conn, now_ms, record.queue, entered=1)
        self._notify()
        return record

    def cancel(self, task_id: str) -> TaskResult | None:
        with self._write("cancel") as (conn, now_ms):
            row = self._row(conn, task_id)
            if row is None or row["status"] not in (READY.value, DEFERRED.value):
                return None
            _rows.decode(row)  # poison raises before anything changes
            (stored,) = conn.execute(
                "UPDATE threadmill_tasks SET status = 'CANCELLED', ready_seq = NULL, "
                f"finished_at = ?, token = NULL WHERE id = ? RETURNING {_rows.COLUMNS}",
                (now_ms, task_id),
            ).fetchall()
            self._count(conn, now_ms, row["queue"], finished=1)
            return _rows.decode(stored)

    def request_cancel(self, task_id: str) -> TaskResult | None:
        with self._write("request_cancel") as (conn, now_ms):
            row = self._row(conn, task_id)
            if row is None or row["status"] != RUNNING.value:
                return None
            _rows.decode(row)  # poison raises before anything changes
            (stored,) = conn.execute(
                "UPDATE threadmill_tasks SET cancel_requested_at = "
                "COALESCE(cancel_requested_at, ?) "  # the first request wins
                f"WHERE id = ? RETURNING {_rows.COLUMNS}",
                (now_ms, task_id),
            ).fetchall()
            return _rows.decode(stored)

    def purge(self, queue: str, status: TaskResultStatus) -> int:
        status = check_purgeable(status)
        with self._write("purge") as (conn, _now_ms):
            cursor = conn.execute(
                f"DELETE FROM threadmill_tasks WHERE queue = ? AND status = '{status.value}'",
                (queue,),
            )
            return int(cursor.rowcount)
