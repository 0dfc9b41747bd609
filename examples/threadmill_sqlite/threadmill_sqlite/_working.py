"""`SQLiteBackend`'s worker side: claims, leases, decisions, starts, releases and waits."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from threadmill_core.checks import (
    check_decision,
    check_delay,
    check_limit,
    check_progress_updates,
    queue_names,
    ttl_ms,
)
from threadmill_core.clock import duration_ms, from_ms
from threadmill_core.errors import PayloadError
from threadmill_core.models import Decision, Lease, Progress, TaskResult, TaskResultStatus

from threadmill_sqlite import _rows
from threadmill_sqlite._transactions import (
    SEGMENT_ORDER,
    SELECT_TASK,
    Transactions,
    marks,
    new_token,
)
from threadmill_sqlite.errors import SQLiteBackendError

READY = TaskResultStatus.READY
DEFERRED = TaskResultStatus.DEFERRED
RUNNING = TaskResultStatus.RUNNING
SUCCESSFUL = TaskResultStatus.SUCCESSFUL
FAILED = TaskResultStatus.FAILED
CANCELLED = TaskResultStatus.CANCELLED

#: `wait_for_tasks` polls ``PRAGMA data_version`` (a shared-memory read, no
#: table access) first after this long, then twice as long each time up to
#: `POLL_MAX` seconds; it queries the table only when that version changed.
POLL_MIN = 0.005
POLL_MAX = 0.2


class SQLiteWorking(Transactions):
    """`claim`, `extend`, the decisions, `mark_started`, `record_progress`, `release` and
    `wait_for_tasks`."""

    def claim(
        self,
        queues: Sequence[str],
        *,
        worker: str,
        lease_ttl: timedelta,
        limit: int = 1,
    ) -> list[Lease]:
        names = queue_names(queues)
        check_limit(limit)
        lease_ms = ttl_ms("lease_ttl", lease_ttl)
        worker = _rows.check_worker(worker)
        leases: list[Lease] = []
        with self._write("claim") as (conn, now_ms):
            self._promote(conn, self._due(conn, now_ms, names))
            deadline_ms = now_ms + lease_ms
            for queue in names:
                while len(leases) < limit:
                    rows = conn.execute(
                        f"{SELECT_TASK} WHERE status = 'READY' AND queue = ? "
                        f"ORDER BY {SEGMENT_ORDER[READY]} LIMIT ?",
                        (queue, limit - len(leases)),
                    ).fetchall()
                    if not rows:
                        break
                    for row in rows:
                        record = self._decode_or_quarantine(conn, row, now_ms)
                        if record is None:
                            continue  # poison does not count toward the limit
                        token = new_token()
                        (stored,) = conn.execute(
                            "UPDATE threadmill_tasks SET status = 'RUNNING', ready_seq = NULL, "
                            "token = ?, claim = 'unstarted', deadline = ?, "
                            "attempts = attempts + 1, "
                            "last_attempted_at = ?, started_at = COALESCE(started_at, ?), "
                            f"worker_ids = ? WHERE id = ? RETURNING {_rows.COLUMNS}",
                            (
                                token,
                                deadline_ms,
                                now_ms,
                                now_ms,
                                _rows.encode_worker_ids((*record.worker_ids, worker)),
                                record.id,
                            ),
                        ).fetchall()
                        leases.append(
                            Lease(
                                token=token,
                                deadline=from_ms(deadline_ms),
                                record=_rows.decode(stored),
                                unstarted_expiries=row["unstarted_expiries"],
                            )
                        )
        return leases

    def extend(self, lease: Lease, lease_ttl: timedelta) -> Lease | None:
        return self.extend_many([lease], lease_ttl)[0]

    def extend_many(self, leases: Sequence[Lease], lease_ttl: timedelta) -> list[Lease | None]:
        """`extend` for every lease, in one transaction; answers in the order given.

        A renewed task whose stored bytes no longer decode is renewed too,
        answered with the lease's own record, so its neighbours in the batch
        are; `claim_expired` quarantines it once its lease lapses.
        """
        leases = list(leases)
        lease_ms = ttl_ms("lease_ttl", lease_ttl)
        if not leases:
            return []
        renewed: list[Lease | None] = []
        with self._write("extend") as (conn, now_ms):
            deadline_ms = now_ms + lease_ms
            for lease in leases:
                rows = conn.execute(
                    "UPDATE threadmill_tasks SET deadline = ? "
                    "WHERE id = ? AND token = ? AND status = 'RUNNING' "
                    f"RETURNING {_rows.COLUMNS}",
                    (deadline_ms, lease.task_id, lease.token),
                ).fetchall()
                if not rows:
                    renewed.append(None)
                    continue
                try:
                    record = _rows.decode(rows[0])
                except PayloadError:  # poison: the holder's record; claim_expired quarantines it
                    record = lease.record
                renewed.append(
                    Lease(
                        token=lease.token,
                        deadline=from_ms(deadline_ms),
                        record=record,
                        cancel_requested=rows[0]["cancel_requested_at"] is not None,
                    )
                )
        return renewed

    def complete(self, lease: Lease, record: TaskResult) -> TaskResult | None:
        return self.decide_many([Decision(lease=lease, record=record)])[0]

    def retry(self, lease: Lease, record: TaskResult, delay: timedelta) -> TaskResult | None:
        return self.decide_many([Decision(lease=lease, record=record, retry_delay=delay)])[0]

    def decide_many(self, decisions: Sequence[Decision]) -> list[TaskResult | None]:
        """Every decision in one transaction, each fenced on its own; answers in order.

        Every decision is checked (`check_decision`) and its errors and return
        value encoded before the transaction, so a bad one changes nothing. A
        decided task whose stored bytes no longer decode is decided all the
        same and answered on the lease's record, so its neighbours are.
        """
        decisions = list(decisions)
        encoded = [_encode_decision(decision) for decision in decisions]
        if not decisions:
            return []
        with self._write("decide") as (conn, now_ms):
            answers = [
                self._decide(conn, now_ms, decision, errors, value)
                for decision, (errors, value) in zip(decisions, encoded, strict=True)
            ]
        if any(a is not None and a.status is READY for a in answers):
            self._notify()
        return answers

    def _decide(
        self,
        conn: sqlite3.Connection,
        now_ms: int,
        decision: Decision,
        errors: bytes,
        value: bytes | None,
    ) -> TaskResult | None:
        row = self._row(conn, decision.lease.task_id)
        if row is None or row["token"] != decision.lease.token:
            return None
        status = TaskResultStatus(row["status"])
        completing = decision.retry_delay is None
        # The states this kind of decision leaves a task in, while its token stays (a
        # retry of a task with a cancel request finalizes it CANCELLED).
        repeat_states = (
            {SUCCESSFUL, FAILED, CANCELLED} if completing else {READY, DEFERRED, CANCELLED}
        )
        if status in repeat_states:
            return _rows.decode(row)  # a repeat after a lost reply: answered as the first time
        if status is not RUNNING:
            return None
        if not completing and row["cancel_requested_at"] is not None:
            sql = (  # it never goes back: CANCELLED, with the errors given
                "UPDATE threadmill_tasks SET status = 'CANCELLED', errors = ?, "
                "finished_at = ?, deadline = NULL WHERE id = ?"
            )
            params: tuple[Any, ...] = (errors, now_ms)
            self._count(conn, now_ms, row["queue"], finished=1)
        elif decision.retry_delay is None:
            sql = (
                "UPDATE threadmill_tasks SET status = ?, errors = ?, return_value = ?, "
                "finished_at = ?, deadline = NULL WHERE id = ?"
            )
            params = (decision.record.status.value, errors, value, now_ms)
            self._count(conn, now_ms, row["queue"], finished=1)
        elif (delay_ms := duration_ms(decision.retry_delay)) == 0:
            sql = (
                "UPDATE threadmill_tasks SET status = 'READY', ready_seq = ?, errors = ?, "
                "deadline = NULL WHERE id = ?"
            )
            params = (self._next_ready_seq(conn), errors)
        else:
            sql = (
                "UPDATE threadmill_tasks SET status = 'DEFERRED', run_after = ?, errors = ?, "
                "deadline = NULL WHERE id = ?"
            )
            params = (now_ms + delay_ms, errors)
        (stored,) = conn.execute(
            f"{sql} RETURNING {_rows.COLUMNS}", (*params, row["id"])
        ).fetchall()
        try:
            return _rows.decode(stored)
        except PayloadError:  # poison: decided all the same, answered on the holder's record
            return _rows.decode_on(stored, decision.lease.record, decision.record)

    def mark_started(self, leases: Sequence[Lease]) -> list[bool]:
        """Every mark in one transaction, each fenced on its own; answers in order."""
        leases = list(leases)
        if not leases:
            return []
        answers: list[bool] = []
        with self._write("mark_started") as (conn, _now_ms):
            for lease in leases:
                cursor = conn.execute(
                    "UPDATE threadmill_tasks SET claim = 'started' WHERE id = ? AND token = ? "
                    "AND status = 'RUNNING' AND claim != 'reaper'",
                    (lease.task_id, lease.token),
                )
                answers.append(cursor.rowcount == 1)
        return answers

    def record_progress(self, updates: Sequence[tuple[Lease, Progress]]) -> list[bool]:
        """Every update in one transaction, each fenced on its own; answers in order."""
        checked = check_progress_updates(updates)
        if not checked:
            return []
        answers: list[bool] = []
        with self._write("record_progress") as (conn, now_ms):
            for lease, progress in checked:
                cursor = conn.execute(
                    "UPDATE threadmill_tasks SET progress = ? WHERE id = ? AND token = ? "
                    "AND status = 'RUNNING'",
                    (_rows.encode_progress(progress, now_ms), lease.task_id, lease.token),
                )
                answers.append(cursor.rowcount == 1)
        return answers

    def release(
        self, leases: Sequence[Lease], delay: timedelta = timedelta(0)
    ) -> list[TaskResult | None]:
        """Every release in one transaction, each fenced on its own; answers in order.

        A task whose stored bytes no longer decode is refused (None) and left
        RUNNING, so its neighbours are given back; `claim_expired` quarantines it.
        """
        leases = list(leases)
        wait_ms = check_delay(delay)
        if not leases:
            return []
        answers: list[TaskResult | None] = []
        with self._write("release") as (conn, now_ms):
            due_ms = now_ms + wait_ms if wait_ms else None
            for lease in leases:
                row = self._row(conn, lease.task_id)
                if (
                    row is None
                    or row["token"] != lease.token
                    or row["status"] != RUNNING.value
                    or row["claim"] != "unstarted"
                ):
                    answers.append(None)
                    continue
                try:
                    record = _rows.decode(row)
                except PayloadError:  # poison: refused, so its neighbours are given back;
                    answers.append(None)  # claim_expired quarantines it once its lease lapses
                    continue
                answers.append(
                    self._give_back(conn, record, row["unstarted_expiries"], now_ms, due_ms)
                )
        if any(answer is not None for answer in answers):
            self._notify()
        return answers

    def wait_for_tasks(self, queues: Sequence[str], timeout: timedelta) -> bool:
        """Block until `queues` have a READY (or due DEFERRED) task, `timeout` passed, or `close`.

        Returns at once if such a task is there. A task made READY by this
        backend object (any thread) wakes the wait at once. One made by
        another process is noticed by polling SQLite's ``data_version``: after
        `POLL_MIN` seconds, then twice as long each time, up to `POLL_MAX`; the
        tasks table is read only when the version moved. So an idle waiter
        costs at most 1 / `POLL_MAX` cheap pragmas a second once it has backed
        off, and notices other processes' work within `POLL_MAX`. `timeout`
        is real time, whatever the clock. False when `timeout` passed and the
        last look found no such task; True otherwise (`close` included).
        """
        names = queue_names(queues)
        deadline = time.monotonic() + max(timeout.total_seconds(), 0.0)
        pause = POLL_MIN
        seen: int | None = None
        while not self._closed:
            generation = self._generation
            try:
                version = self._db.data_version()
                if version != seen:
                    seen = version
                    if self._has_work(names):
                        return True
            except SQLiteBackendError:
                if self._closed:  # `close` took the connection away mid-look
                    return True
                raise
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._wait_for_wake(generation, min(pause, remaining))
            pause = min(pause * 2, POLL_MAX)
        return True

    def _wait_for_wake(self, generation: int, timeout: float) -> None:
        """Sleep up to `timeout` seconds, less if `_notify` or `close` is called."""
        with self._wake:
            self._wake.wait_for(
                lambda: self._closed or self._generation != generation, timeout=timeout
            )

    def _has_work(self, queues: list[str]) -> bool:
        if not queues:
            return False
        places = marks(queues)
        with self._read("wait_for_tasks") as (conn, now_ms):
            (row,) = conn.execute(
                "SELECT EXISTS (SELECT 1 FROM threadmill_tasks "
                f"WHERE status = 'READY' AND queue IN ({places})) "
                "OR EXISTS (SELECT 1 FROM threadmill_tasks "
                f"WHERE status = 'DEFERRED' AND queue IN ({places}) AND run_after <= ?)",
                (*queues, *queues, now_ms),
            ).fetchall()
            return bool(row[0])


def _encode_decision(decision: Decision) -> tuple[bytes, bytes | None]:
    """Check `decision`; return its `errors` and `return_value` columns."""
    check_decision(decision)
    record = decision.record
    errors = _rows.encode_errors(record.errors)
    if decision.retry_delay is None and record.status is SUCCESSFUL:
        return errors, _rows.encode_return_value(record.return_value)
    return errors, None
