"""`SQLiteBackend`'s maintenance: the reaper's pass, cut leases and due deferred tasks."""

from __future__ import annotations

from datetime import timedelta

from threadmill_core.backend import NOTHING_DEFERRED
from threadmill_core.checks import check_limit, ttl_ms
from threadmill_core.clock import from_ms
from threadmill_core.errors import PayloadError
from threadmill_core.models import Lease, TaskResultStatus

from threadmill_sqlite import _rows
from threadmill_sqlite._transactions import SEGMENT_ORDER, SELECT_TASK, Transactions, new_token

RUNNING = TaskResultStatus.RUNNING


class SQLiteMaintenance(Transactions):
    """`claim_expired`, `expire_leases`, `promote_due` and `next_due`."""

    def claim_expired(self, *, limit: int, claim_ttl: timedelta) -> list[Lease]:
        """The reaper's pass, in one transaction: unstarted claims given back, tasks with
        a cancel request finalized CANCELLED, the rest claimed; an undecodable task it
        meets is quarantined."""
        check_limit(limit)
        claim_ms = ttl_ms("claim_ttl", claim_ttl)
        leases: list[Lease] = []
        given_back = False
        with self._write("claim_expired") as (conn, now_ms):
            deadline_ms = now_ms + claim_ms
            while len(leases) < limit:
                rows = conn.execute(
                    f"{SELECT_TASK} WHERE status = 'RUNNING' AND deadline <= ? "
                    f"ORDER BY {SEGMENT_ORDER[RUNNING]} LIMIT ?",
                    (now_ms, limit - len(leases)),
                ).fetchall()
                if not rows:
                    break
                for row in rows:
                    record = self._decode_or_quarantine(conn, row, now_ms)
                    if record is None:
                        continue
                    expiries = row["unstarted_expiries"]
                    if row["claim"] == "unstarted":
                        # Never ran: back to READY uncharged, counted toward the bound.
                        self._give_back(conn, record, expiries + 1, now_ms)
                        given_back = True
                        continue
                    if record.cancel_requested_at is not None:  # never goes back: CANCELLED
                        conn.execute(
                            "UPDATE threadmill_tasks SET status = 'CANCELLED', finished_at = ?, "
                            "token = NULL, claim = 'unstarted', deadline = NULL WHERE id = ?",
                            (now_ms, record.id),
                        )
                        self._count(conn, now_ms, record.queue, finished=1)
                        continue
                    # Not an attempt: only the token, its holder and the deadline change.
                    token = new_token()
                    conn.execute(
                        "UPDATE threadmill_tasks SET token = ?, claim = 'reaper', deadline = ? "
                        "WHERE id = ?",
                        (token, deadline_ms, record.id),
                    )
                    leases.append(Lease(token=token, deadline=from_ms(deadline_ms), record=record))
        if given_back:
            self._notify()
        return leases

    def expire_leases(self, worker: str) -> int:
        """One transaction over the live leases (no index by worker: a supervisor calls this
        once per dead worker process); a row whose worker ids do not decode is left alone."""
        cut = 0
        with self._write("expire_leases") as (conn, now_ms):
            rows = conn.execute(
                "SELECT id, worker_ids FROM threadmill_tasks WHERE status = 'RUNNING' "
                "AND deadline > ? AND claim != 'reaper'",
                (now_ms,),
            ).fetchall()
            for row in rows:
                try:
                    workers = _rows.decode_worker_ids(row)
                except PayloadError:
                    continue
                if workers[-1:] == (worker,):
                    conn.execute(
                        "UPDATE threadmill_tasks SET deadline = ? WHERE id = ?", (now_ms, row["id"])
                    )
                    cut += 1
        return cut

    def promote_due(self, *, limit: int) -> int:
        check_limit(limit)
        with self._write("promote_due") as (conn, now_ms):
            promoted = self._promote(conn, self._due(conn, now_ms, None, limit))
        if promoted:
            self._notify()
        return promoted

    def next_due(self) -> timedelta | None:
        """One read of the ``threadmill_due`` index: the earliest ``run_after`` of DEFERRED."""
        with self._read("next_due") as (conn, now_ms):
            (first,) = conn.execute(
                "SELECT MIN(run_after) FROM threadmill_tasks WHERE status = 'DEFERRED'"
            ).fetchone()
        if first is None:
            return NOTHING_DEFERRED
        return timedelta(milliseconds=max(int(first) - now_ms, 0))
