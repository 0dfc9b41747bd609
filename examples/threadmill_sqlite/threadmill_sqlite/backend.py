"""`SQLiteBackend`: the storage interface on one SQLite database file, with no server.

Written only against threadmill's public interface (`threadmill_core.backend`,
`.checks`, `.models`, `.codec`, `.clock`, `.errors`), as a third-party backend
would be.

Layout. This module holds the class, its options, `enqueue` and `close`;
`SQLiteBackend` mixes in one class per job, each a module of its own:
`_working` (what a worker calls: claim, extend, decide, mark started,
release, wait), `_maintenance` (the reaper's pass, cut leases, due tasks),
`_inspection` (reads and operator actions), `_pauses` and `_live_workers`.
All of them stand on `_transactions`: the transactions, the clock and the
steps they share. `_database` owns the connections and the schema, `_rows`
the codec boundary.

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
order unless the system clock itself steps back. `_read_clock` (in
`_transactions`) is the only place that reads it; the test support in `threadmill_sqlite.testing`
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
on. `promote_due` moves it without decoding; `release` refuses it (left
RUNNING for the reaper) and gives back the rest of its batch; `counts` and
`purge` never decode; `get`, `peek`, `cancel`, `requeue` and `enqueue` of
that id raise `PayloadError` naming the task, and change nothing.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from datetime import datetime, timedelta

from threadmill_core.backend import Backend
from threadmill_core.checks import check_records
from threadmill_core.clock import duration_ms, from_ms, to_ms
from threadmill_core.errors import InvalidOption
from threadmill_core.models import TaskResult, TaskResultStatus, validate_timedelta

from threadmill_sqlite import _rows
from threadmill_sqlite._database import SYNCHRONOUS, Database
from threadmill_sqlite._inspection import SQLiteInspection
from threadmill_sqlite._live_workers import SQLiteLiveWorkers
from threadmill_sqlite._maintenance import SQLiteMaintenance
from threadmill_sqlite._pauses import SQLitePauses
from threadmill_sqlite._transactions import NOW_MS_SQL, SEGMENT_ORDER
from threadmill_sqlite._working import POLL_MAX, POLL_MIN, SQLiteWorking

__all__ = [
    "DEFAULT_BUSY_TIMEOUT",
    "DEFAULT_RESULT_TTL",
    "NOW_MS_SQL",
    "POLL_MAX",
    "POLL_MIN",
    "SEGMENT_ORDER",
    "SQLiteBackend",
]

READY = TaskResultStatus.READY
DEFERRED = TaskResultStatus.DEFERRED

DEFAULT_RESULT_TTL = timedelta(days=1)
DEFAULT_BUSY_TIMEOUT = timedelta(seconds=30)


class SQLiteBackend(
    SQLiteWorking,
    SQLiteMaintenance,
    SQLiteInspection,
    SQLitePauses,
    SQLiteLiveWorkers,
    Backend,
):
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

    # --- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify_all()
        self._db.close()
