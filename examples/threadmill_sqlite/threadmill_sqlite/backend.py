"""`SQLiteBackend`: the storage interface on one SQLite database file, with no server.

Written only against threadmill's public interface (`threadmill_core.backend`,
`.checks`, `.models`, `.codec`, `.clock`, `.errors`), as a third-party backend
would be.

Sharing. Any number of threads and processes on one machine may open the
same file: each thread gets its own connection, the file is in WAL mode, and
every state change is one transaction begun with ``BEGIN IMMEDIATE``, which
takes SQLite's single write lock before it reads anything. So each method
is atomic (for a batch, the whole batch is), two claims can never take one
task, and a process killed at any instant leaves the file as it was before
or after its last transaction: a task it was running stays RUNNING under its
lease until the reaper takes it up. Reads (`get`, `peek`, `counts`) use a
plain ``BEGIN``: a consistent snapshot that neither waits for nor holds up
the writer. A file on a network file system is not supported (SQLite's
locks and WAL's shared memory need a local one).

The clock. The database's clock is the one clock: each transaction reads
SQLite's ``julianday('now')`` once, after it holds its lock (`NOW_MS_SQL`),
and every deadline, due time and timestamp it writes is that reading plus a
duration. On one machine every process reads the same system clock, and
since each reading happens under the write lock, timestamps follow commit
order unless the system clock itself steps back. `_read_clock` is the only
place that reads it; the test support in `threadmill_sqlite.testing`
overrides it in subclasses (to shift time forward, or to follow a fake
clock). This class has no switch for that.

Results expire: every write transaction first deletes terminal tasks whose
``finished_at + result_ttl`` is not after now, and reads leave such rows
out, so a result is gone at the same moment for every reader.

Recorded starts: the ``claim`` column says who holds a RUNNING task's token
(a worker's claim whose start is recorded or not, or the reaper), and
``unstarted_expiries`` how many expired unstarted claims were given back;
every claim resets the first, nothing the second.

Tokens are 128 random bits, so a token is never reused, across tasks,
processes, or a task purged and enqueued again. A task keeps its token after
`complete` or `retry` (that is how a repeated decision is recognised) until
`requeue` or `cancel` clears it.

Poison (stored bytes that do not decode, or decode to another task): `claim`
and `claim_expired` finalize it FAILED with a `TaskQuarantined` error (see
`threadmill_sqlite._rows.quarantine`), do not count it toward `limit`, and go
on. `promote_due` moves it without decoding; `counts` and `purge` never
decode; `get`, `peek`, `cancel`, `requeue` and `enqueue` of that id raise
`PayloadError` naming the task, and change nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from threadmill_core.backend import NOTHING_DEFERRED, RATE_HISTORY, Backend
from threadmill_core.checks import (
    check_decision,
    check_delay,
    check_limit,
    check_offset,
    check_purgeable,
    check_records,
    check_window,
    queue_names,
    ttl_ms,
)
from threadmill_core.clock import duration_ms, from_ms, to_ms
from threadmill_core.errors import InvalidOption, PayloadError
from threadmill_core.models import (
    Decision,
    Lease,
    QueueCounts,
    QueueRates,
    TaskResult,
    TaskResultStatus,
    validate_timedelta,
)

from threadmill_sqlite import _rows
from threadmill_sqlite._database import SYNCHRONOUS, Database
from threadmill_sqlite._live_workers import SQLiteLiveWorkers
from threadmill_sqlite._pauses import SQLitePauses
from threadmill_sqlite.errors import SQLiteBackendError

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

#: `wait_for_tasks` polls ``PRAGMA data_version`` (a shared-memory read, no
#: table access) first after this long, then twice as long each time up to
#: `POLL_MAX` seconds; it queries the table only when that version changed.
POLL_MIN = 0.005
POLL_MAX = 0.2

#: Telemetry buckets (see `SQLiteBackend.rates`) are this many milliseconds
#: long, and this many are kept per queue.
RATE_BUCKET_MS = 1000
RATE_BUCKETS = -(-duration_ms(RATE_HISTORY) // RATE_BUCKET_MS)

DEFAULT_RESULT_TTL = timedelta(days=1)
DEFAULT_BUSY_TIMEOUT = timedelta(seconds=30)


class SQLiteBackend(SQLitePauses, SQLiteLiveWorkers, Backend):
    """Tasks in the SQLite database file at `path`, created (with its tables) if missing.

    `path` is made absolute when the backend is built, so a later change of
    the working directory does not move it. ``":memory:"`` and ``file:``
    URIs are refused (`InvalidOption`): an in-memory database is private to
    one connection, so it could not be shared; use ``memory://`` for that.

    `result_ttl` (positive) is how long terminal tasks stay readable after
    `finished_at`; processes sharing one file should agree on it, since each
    deletes what its own setting says has expired. `busy_timeout` (positive)
    is how long an operation waits for another connection's write lock before
    raising `threadmill_sqlite.errors.DatabaseLocked`; the lock is held only
    for the length of one operation, never while a task runs. `synchronous`
    is ``"full"`` (the default: a state change that returned survives a power
    loss) or ``"normal"`` (it survives the process being killed, which is
    what a worker needs; a power loss may undo the last commits; much faster
    on disks with slow flushes).

    `close` closes every thread's connection and wakes every `wait_for_tasks`
    caller; the backend cannot be used afterwards (`SQLiteBackendError`).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        result_ttl: timedelta = DEFAULT_RESULT_TTL,
        busy_timeout: timedelta = DEFAULT_BUSY_TIMEOUT,
        synchronous: str = "full",
    ) -> None:
        name = os.fspath(path)
        if not isinstance(name, str) or name in ("", ":memory:") or name.startswith("file:"):
            raise InvalidOption(
                f"a SQLite backend needs the path of a database file, got {name!r} "
                "(for a private in-memory queue, use memory://)"
            )
        self._path = os.path.abspath(name)
        self._result_ttl = validate_timedelta("result_ttl", result_ttl)
        self._result_ttl_ms = duration_ms(self._result_ttl)
        self._busy_timeout = validate_timedelta("busy_timeout", busy_timeout)
        if not isinstance(synchronous, str) or synchronous not in SYNCHRONOUS:
            raise InvalidOption(
                f"synchronous must be one of {', '.join(SYNCHRONOUS)}, got {synchronous!r}"
            )
        self._db = Database(self._path, busy_timeout=self._busy_timeout, synchronous=synchronous)
        # Wakes this process's waiters as soon as this backend makes a task READY;
        # other processes' changes are seen by polling (see `wait_for_tasks`).
        self._wake = threading.Condition()
        self._generation = 0
        self._closed = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._path!r}, result_ttl={self._result_ttl!r})"

    @property
    def path(self) -> str:
        """The database file, as an absolute path."""
        return self._path

    @property
    def result_ttl(self) -> timedelta:
        return self._result_ttl

    @property
    def busy_timeout(self) -> timedelta:
        return self._busy_timeout

    @property
    def synchronous(self) -> str:
        return self._db.synchronous

    # --- the clock ---------------------------------------------------------------------

    def now(self) -> datetime:
        with self._read("now") as (_conn, now_ms):
            return from_ms(now_ms)

    def _read_clock(self, conn: sqlite3.Connection) -> int:
        """The database's clock, in integer milliseconds, read inside the caller's transaction.

        Every operation reads it exactly once, right after its transaction
        began. Only test support overrides this (see `threadmill_sqlite.testing`).
        """
        return int(conn.execute(NOW_MS_SQL).fetchone()[0])

    # --- producing ---------------------------------------------------------------------

    def enqueue(self, records: Sequence[TaskResult]) -> list[TaskResult]:
        records = list(records)
        check_records(records)
        # Encode (and so check) every new record before the transaction: a value the
        # codec refuses leaves the whole batch unstored. The first of an id wins.
        payloads: dict[str, tuple[TaskResult, bytes]] = {}
        for record in records:
            if record.id not in payloads:
                payloads[record.id] = (record, _rows.encode_payload(record))
        if not records:
            return []
        made_ready = False
        with self._write("enqueue") as (conn, now_ms):
            stored: dict[str, TaskResult] = {}
            for task_id, (record, payload) in payloads.items():
                row = self._row(conn, task_id)
                if row is not None:  # idempotent on id; a poisoned id raises, undoing the batch
                    stored[task_id] = _rows.decode(row)
                    continue
                run_after_ms = None if record.run_after is None else to_ms(record.run_after)
                deferred = run_after_ms is not None and run_after_ms > now_ms
                made_ready |= not deferred
                (row,) = conn.execute(
                    "INSERT INTO threadmill_tasks (id, queue, priority, status, payload, "
                    "ready_seq, run_after, enqueued_at, attempts, worker_ids, errors) "
                    f"VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?) RETURNING {_rows.COLUMNS}",
                    (
                        task_id,
                        record.queue,
                        record.priority,
                        (DEFERRED if deferred else READY).value,
                        payload,
                        None if deferred else self._next_ready_seq(conn),
                        run_after_ms,
                        now_ms,
                        _rows.EMPTY_LIST,
                        _rows.EMPTY_LIST,
                    ),
                ).fetchall()
                stored[task_id] = _rows.decode(row)
                self._count(conn, now_ms, record.queue, entered=1)
        if made_ready:
            self._notify()
        return [stored[record.id] for record in records]

    # --- working -----------------------------------------------------------------------

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
                        token = _new_token()
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
                    Lease(token=lease.token, deadline=from_ms(deadline_ms), record=record)
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
        # The states this kind of decision leaves a task in, while its token stays.
        repeat_states = {SUCCESSFUL, FAILED} if completing else {READY, DEFERRED}
        if status in repeat_states:
            return _rows.decode(row)  # a repeat after a lost reply: answered as the first time
        if status is not RUNNING:
            return None
        if decision.retry_delay is None:
            sql = (
                "UPDATE threadmill_tasks SET status = ?, errors = ?, return_value = ?, "
                "finished_at = ?, deadline = NULL WHERE id = ?"
            )
            params: tuple[Any, ...] = (decision.record.status.value, errors, value, now_ms)
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

    def release(
        self, leases: Sequence[Lease], delay: timedelta = timedelta(0)
    ) -> list[TaskResult | None]:
        """Every release in one transaction, each fenced on its own; answers in order."""
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
                answers.append(
                    self._give_back(conn, _rows.decode(row), row["unstarted_expiries"], due_ms)
                )
        if any(answer is not None for answer in answers):
            self._notify()
        return answers

    def _give_back(
        self,
        conn: sqlite3.Connection,
        record: TaskResult,
        expiries: int,
        due_ms: int | None = None,
    ) -> TaskResult:
        """Undo a RUNNING task's claim: READY tail (DEFERRED till `due_ms`, if given),
        attempt and worker undone, token cleared."""
        attempts = max(record.attempts - 1, 0)
        place = (
            ("status = 'READY', ready_seq = ?", self._next_ready_seq(conn))
            if due_ms is None
            else ("status = 'DEFERRED', run_after = ?", due_ms)
        )
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
        marks = _marks(queues)
        with self._read("wait_for_tasks") as (conn, now_ms):
            (row,) = conn.execute(
                "SELECT EXISTS (SELECT 1 FROM threadmill_tasks "
                f"WHERE status = 'READY' AND queue IN ({marks})) "
                "OR EXISTS (SELECT 1 FROM threadmill_tasks "
                f"WHERE status = 'DEFERRED' AND queue IN ({marks}) AND run_after <= ?)",
                (*queues, *queues, now_ms),
            ).fetchall()
            return bool(row[0])

    # --- maintenance -------------------------------------------------------------------

    def claim_expired(self, *, limit: int, claim_ttl: timedelta) -> list[Lease]:
        """The reaper's pass, in one transaction: unstarted claims given back, the rest
        claimed; an undecodable task it meets is quarantined."""
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
                        self._give_back(conn, record, expiries + 1)
                        given_back = True
                        continue
                    # Not an attempt: only the token, its holder and the deadline change.
                    token = _new_token()
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

    def _due(
        self, conn: sqlite3.Connection, now_ms: int, queues: list[str] | None, limit: int = -1
    ) -> list[str]:
        """Ids of the due DEFERRED tasks of `queues` (None: all), in DEFERRED order."""
        where = "" if queues is None else f"AND queue IN ({_marks(queues)}) "
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

    # --- inspection --------------------------------------------------------------------

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
                f"return_value = NULL, token = NULL WHERE id = ? RETURNING {_rows.COLUMNS}",
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

    def purge(self, queue: str, status: TaskResultStatus) -> int:
        status = check_purgeable(status)
        with self._write("purge") as (conn, _now_ms):
            cursor = conn.execute(
                f"DELETE FROM threadmill_tasks WHERE queue = ? AND status = '{status.value}'",
                (queue,),
            )
            return int(cursor.rowcount)

    # --- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify_all()
        self._db.close()

    # --- internals ---------------------------------------------------------------------

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


def _encode_decision(decision: Decision) -> tuple[bytes, bytes | None]:
    """Check `decision`; return its `errors` and `return_value` columns."""
    check_decision(decision)
    record = decision.record
    errors = _rows.encode_errors(record.errors)
    if decision.retry_delay is None and record.status is SUCCESSFUL:
        return errors, _rows.encode_return_value(record.return_value)
    return errors, None


def _marks(values: Sequence[object]) -> str:
    return ", ".join("?" * len(values))


def _new_token() -> str:
    """128 random bits: never the same twice, whatever process or task draws it."""
    return secrets.token_hex(16)
