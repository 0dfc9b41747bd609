"""One SQLite database file: a connection per thread, transactions, the schema.

Nothing here knows the protocol. `Database` opens the file in WAL mode (so
readers never block the one writer, and a reader in one process never blocks
a writer in another), applies ``schema.sql``, and hands out transactions:
``transaction(write=True)`` begins with ``BEGIN IMMEDIATE``, which takes the
database's write lock up front, so a state change never finds the data
changed under it half way and never fails with a lock upgrade deadlock.
Waiting for the lock is SQLite's busy handler, bounded by `busy_timeout`.

Every `sqlite3.Error` raised inside a transaction, or while connecting,
becomes a `threadmill_sqlite.errors.SQLiteBackendError` here, and nowhere else.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from importlib import resources

from threadmill_sqlite.errors import DatabaseLocked, SQLiteBackendError

log = logging.getLogger("threadmill_sqlite")

SCHEMA_VERSION = 3
#: What brings a file of each older version to the next: version -> statements.
#: Run in the transaction that applies ``schema.sql``, so a file is migrated
#: whole or not at all, once, even by two processes opening it at once.
MIGRATIONS = {
    1: (
        # Recorded starts: a RUNNING task of version 1 reads as a claim never
        # started, so its expiry gives it back uncharged (the side of running again).
        "ALTER TABLE threadmill_tasks ADD COLUMN claim TEXT NOT NULL DEFAULT 'unstarted' "
        "CHECK (claim IN ('unstarted', 'started', 'reaper'))",
        "ALTER TABLE threadmill_tasks ADD COLUMN unstarted_expiries INTEGER NOT NULL DEFAULT 0",
    ),
    2: (
        # Progress and cancel requests: no task of version 2 has either.
        "ALTER TABLE threadmill_tasks ADD COLUMN progress BLOB",
        "ALTER TABLE threadmill_tasks ADD COLUMN cancel_requested_at INTEGER",
    ),
}
#: The `synchronous` settings offered, and their pragma values.
SYNCHRONOUS = {"full": "FULL", "normal": "NORMAL"}
SCHEMA = resources.files("threadmill_sqlite").joinpath("schema.sql").read_text(encoding="utf-8")


def wrap(exc: sqlite3.Error, doing: str) -> SQLiteBackendError:
    """The backend's exception for a driver error met while `doing` something."""
    if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc).lower():
        return DatabaseLocked(f"{doing}: the database stayed locked by another writer ({exc})")
    return SQLiteBackendError(f"{doing}: {type(exc).__name__}: {exc}")


class Database:
    """The file at `path` (absolute), opened once per thread that uses it.

    Connections are made lazily, one per thread (a `sqlite3.Connection` must
    not run two statements at once), and all of them are closed by `close`.
    A thread's connection stays open until `close`, so a program that keeps
    starting new threads should reuse a pool of them. Each connection waits up
    to `busy_timeout` for another connection's write lock.

    `synchronous` is SQLite's setting of that name: with ``"full"`` a state
    change that returned survives the process being killed and the machine
    losing power; with ``"normal"`` it survives the process being killed (the
    case that matters for a worker) but the last commits before a power loss
    may be lost, for far fewer disk flushes.
    """

    def __init__(self, path: str, *, busy_timeout: timedelta, synchronous: str) -> None:
        if synchronous not in SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {list(SYNCHRONOUS)}, got {synchronous!r}")
        self.path = path
        self.busy_timeout = busy_timeout
        self.synchronous = synchronous
        self._local = threading.local()
        self._lock = threading.Lock()
        self._handles: list[_Handle] = []
        self._closed = False
        try:
            with self._using() as conn:
                self._use_wal(conn)
            self._apply_schema()
        except BaseException:
            self.close()
            raise

    # --- connections -------------------------------------------------------------------

    def _handle(self) -> _Handle:
        """This thread's connection, opened on first use."""
        handle: _Handle | None = getattr(self._local, "handle", None)
        if handle is not None:
            return handle
        with self._lock:
            if self._closed:
                raise SQLiteBackendError(f"the backend for {self.path} is closed")
            try:
                conn = sqlite3.connect(
                    self.path,
                    timeout=self.busy_timeout.total_seconds(),
                    # Transactions are ours: BEGIN IMMEDIATE / BEGIN, COMMIT, ROLLBACK.
                    isolation_level=None,
                    # `close` closes every thread's connection, from its own thread.
                    check_same_thread=False,
                )
                conn.row_factory = sqlite3.Row
                conn.execute(f"PRAGMA synchronous = {SYNCHRONOUS[self.synchronous]}")
            except sqlite3.Error as exc:
                raise wrap(exc, f"opening {self.path}") from exc
            handle = _Handle(conn)
            self._handles.append(handle)
        self._local.handle = handle
        return handle

    @contextlib.contextmanager
    def _using(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection, held so that `close` cannot close it mid-use."""
        handle = self._handle()
        with handle.lock:
            if self._closed:
                raise SQLiteBackendError(f"the backend for {self.path} is closed")
            yield handle.conn

    def close(self) -> None:
        """Close every connection; later operations raise `SQLiteBackendError`.

        A connection in use by another thread is closed once that thread's
        current transaction ends (closing it under a running statement would
        crash the interpreter).
        """
        with self._lock:
            self._closed = True
            handles, self._handles = self._handles, []
        for handle in handles:
            with handle.lock:
                try:
                    handle.conn.close()
                except sqlite3.Error as exc:  # best effort: the data is committed
                    log.warning("closing a connection to %s failed: %s", self.path, exc)

    @property
    def closed(self) -> bool:
        return self._closed

    # --- setup -------------------------------------------------------------------------

    def _use_wal(self, conn: sqlite3.Connection) -> None:
        """Switch the file to WAL mode, a setting the file keeps.

        Switching a new file needs a moment alone with it. While another
        connection is in the way, SQLite either reports the file locked or
        leaves the mode as it was (and says so); both are retried until
        `busy_timeout` has passed.
        """
        deadline = time.monotonic() + self.busy_timeout.total_seconds()
        while True:
            try:
                mode = str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower()
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc).lower() or time.monotonic() > deadline:
                    raise wrap(exc, f"switching {self.path} to WAL") from exc
                mode = "locked"
            except sqlite3.Error as exc:
                raise wrap(exc, f"opening {self.path}") from exc
            if mode == "wal":
                return
            if time.monotonic() > deadline:
                raise SQLiteBackendError(
                    f"{self.path} cannot use write-ahead logging (journal_mode stays {mode!r}); "
                    "threadmill_sqlite needs a file on a local file system"
                )
            time.sleep(0.01)

    def _apply_schema(self) -> None:
        """Create what ``schema.sql`` describes, if missing, and migrate an older version;
        refuse a newer one."""
        with self.transaction(write=True, doing="applying the schema") as tx:
            for statement in _statements(SCHEMA):
                tx.execute(statement)
            row = tx.execute(
                "SELECT value FROM threadmill_meta WHERE name = 'schema_version'"
            ).fetchone()
            while row is not None and row[0] in MIGRATIONS:
                for statement in MIGRATIONS[row[0]]:
                    tx.execute(statement)
                tx.execute(
                    "UPDATE threadmill_meta SET value = ? WHERE name = 'schema_version'",
                    (row[0] + 1,),
                )
                log.info("%s: migrated threadmill_sqlite schema version %d to %d",
                         self.path, row[0], row[0] + 1)  # fmt: skip
                row = (row[0] + 1,)
        if row is None or row[0] != SCHEMA_VERSION:
            raise SQLiteBackendError(
                f"{self.path} holds threadmill_sqlite schema version "
                f"{None if row is None else row[0]}, this version needs {SCHEMA_VERSION}"
            )

    # --- transactions ------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self, *, write: bool, doing: str) -> Iterator[sqlite3.Connection]:
        """One transaction on this thread's connection: committed if the block returns.

        `write` begins with ``BEGIN IMMEDIATE`` (the write lock, taken now);
        otherwise with a plain ``BEGIN``, a snapshot that never blocks and is
        never blocked. Any exception rolls everything back; a `sqlite3.Error`
        is raised as `SQLiteBackendError` naming `doing`.
        """
        with self._using() as conn:
            try:
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            except sqlite3.Error as exc:
                raise wrap(exc, doing) from exc
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:
                    try:
                        conn.execute("ROLLBACK")
                    except sqlite3.Error as rollback_exc:  # the first error is the one to report
                        log.warning("rollback on %s failed: %s", self.path, rollback_exc)
                if isinstance(exc, sqlite3.Error):
                    raise wrap(exc, doing) from exc
                raise

    def data_version(self) -> int:
        """SQLite's ``data_version`` on this thread's connection.

        It changes whenever another connection (any thread, any process)
        commits; polling it costs no table read.
        """
        with self._using() as conn:
            try:
                return int(conn.execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.Error as exc:
                raise wrap(exc, "reading data_version") from exc


class _Handle:
    """One thread's connection and the lock that keeps `close` off it while it is in use."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.lock = threading.Lock()


def _statements(script: str) -> list[str]:
    """The statements of an SQL script, split where `sqlite3.complete_statement` says."""
    statements, current = [], ""
    for line in script.splitlines(keepends=True):
        if line.lstrip().startswith("--") and not current.strip():
            continue
        current += line
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    if current.strip():
        raise SQLiteBackendError(f"schema.sql ends inside a statement: {current.strip()[:60]!r}")
    return statements
