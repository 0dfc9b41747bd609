"""Connections to PostgreSQL, and the one boundary where driver errors are translated.

`Database` holds a `psycopg_pool.ConnectionPool` of autocommit connections,
so a single statement is a transaction of its own: one round trip, one
commit. Every call goes through `Database.fetch` or `Database.transaction`,
which turn each `psycopg.Error` into `PostgresUnavailable` (an outage:
workers back off and try again) or `PostgresBackendError` (a refusal), and
decide what may be sent again:

- A statement that failed before it could have been applied (no connection
  to be had, the server refused it, a deadlock or serialization failure
  rolled it back) is sent again, whatever it was: nothing happened.
- One that may have been applied (the connection dropped while it ran, or
  during its commit) is sent again only when the caller says a repeat is
  recognised (`repeatable`); otherwise `PostgresUnavailable` says the
  outcome is unknown. A claim handles this itself (see `PostgresBackend.claim`).
- `transaction` runs a block of statements between BEGIN and COMMIT: if
  anything fails before the COMMIT is sent, all of it was rolled back and the
  block runs again; only a failure during the COMMIT leaves the outcome unknown.

Each call is tried at most three times, 50 and then 100 ms apart.

A connection taken from the pool is looked at first, without a round trip:
one whose socket has something to read while idle was closed by the server
(a restart, ``pg_terminate_backend``, an idle timeout), and is replaced
before anything is sent on it. A slot of the pool whose reconnection keeps
failing is given up after `RECONNECT_TIMEOUT` and made again when a call
needs it, so a pool never waits out a long backoff once the server is back.

A pool still open when the interpreter exits is closed by an `atexit`
handler (`close_open_pools`), so a process that never calls `close` still
exits at once.
"""

from __future__ import annotations

import atexit
import logging
import os
import select
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeAlias, TypeVar

import psycopg
import psycopg.errors
from psycopg_pool import ConnectionPool, PoolTimeout

from threadmill_postgres.errors import PostgresBackendError, PostgresUnavailable
from threadmill_postgres.options import place
from threadmill_postgres.pool_log import POOL_LOG, first_line

log = logging.getLogger("threadmill_postgres")

T = TypeVar("T")

#: A connection of the pool: autocommit, tuples for rows.
Connection: TypeAlias = psycopg.Connection[tuple[Any, ...]]
#: Statement parameters, by name.
Params: TypeAlias = Mapping[str, Any]
Rows: TypeAlias = list[tuple[Any, ...]]

#: Repeats of a call after the first try.
REPEATS = 2

#: Seconds a call waits for a connection while its pool's attempts to connect
#: fail (see `pool_log`), instead of the pool's timeout.
DOWN_WAIT = 0.5

#: Seconds the pool keeps trying to make one of its connections again (doubling
#: its waits from one second) before it gives that slot up; a call that then
#: needs a connection starts a new attempt at once.
RECONNECT_TIMEOUT = 10.0

#: Errors after which the transaction is known to have been rolled back: it
#: changed nothing, so it may be sent again, whatever it was. A statement
#: cancelled by ``statement_timeout`` is among them; so is a write refused by
#: a server in recovery or a standby (a failover in progress).
ROLLED_BACK: tuple[type[psycopg.Error], ...] = (
    psycopg.errors.SerializationFailure,
    psycopg.errors.DeadlockDetected,
    psycopg.errors.LockNotAvailable,
    psycopg.errors.QueryCanceled,
    psycopg.errors.ReadOnlySqlTransaction,
    psycopg.errors.CannotConnectNow,
    psycopg.errors.TooManyConnections,
)

#: Errors that mean "PostgreSQL is not there right now", not "PostgreSQL said
#: no": a dropped or refused connection, a server shutting down or killed
#: (``pg_terminate_backend``, a crash, a restart).
UNAVAILABLE: tuple[type[psycopg.Error], ...] = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
)

#: Operational errors that are refusals all the same: SQLSTATE class 54, a limit
#: of PostgreSQL's that the statement's data passes (an index row over 2,704
#: bytes: an id or queue name of thousands of characters). Repeating it cannot
#: help, and it changed nothing, so it is raised as `refused`, not as an outage.
LIMIT_EXCEEDED: tuple[type[psycopg.Error], ...] = (
    psycopg.errors.ProgramLimitExceeded,
    psycopg.errors.StatementTooComplex,
    psycopg.errors.TooManyColumns,
    psycopg.errors.TooManyArguments,
)


class Failure(Exception):
    """A try that failed at the driver: `maybe_applied` says whether it may have changed data."""

    def __init__(self, cause: psycopg.Error, *, maybe_applied: bool) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.maybe_applied = maybe_applied


def classify(exc: psycopg.Error, *, sent: bool) -> Failure | None:
    """The `Failure` an outage or a rollback is, or None for a refusal (raise it as an error).

    `sent`: the statement may have reached the server. A pool that gives no
    connection in time sent nothing.
    """
    if isinstance(exc, PoolTimeout):
        return Failure(exc, maybe_applied=False)
    if isinstance(exc, ROLLED_BACK):
        return Failure(exc, maybe_applied=False)
    if isinstance(exc, LIMIT_EXCEEDED):
        return None
    if isinstance(exc, UNAVAILABLE):
        return Failure(exc, maybe_applied=sent)
    return None


def refused(exc: psycopg.Error, what: str) -> PostgresBackendError:
    """The error for a statement PostgreSQL refused, naming the operation and the SQLSTATE."""
    state = getattr(exc, "sqlstate", None)
    code = f" [{state}]" if state else ""
    return PostgresBackendError(f"PostgreSQL refused {what}{code}: {exc}")


class Database:
    """A pool of autocommit connections to one database, and the calls that use it.

    The pool opens one connection at once (in the background: a server that
    cannot be reached now is not an error, since workers start during outages
    too) and more, up to `size`, as calls overlap; idle extra ones close
    after ten minutes. A call waits up to `timeout` seconds for a connection.
    `connection_class` is psycopg's, or a subclass of it (for tracing, say).

    `setup`, given, runs once on a connection before the first call goes
    through (the namespace's schema is made there); until it has succeeded,
    every call tries it first.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        size: int,
        timeout: float,
        name: str,
        connection_class: type[Connection] = psycopg.Connection,
        setup: Callable[[Connection], None] | None = None,
    ) -> None:
        self.conninfo = conninfo
        self.timeout = timeout
        self.name = name
        #: Where the pool connects, for messages: host, port and database, no credentials.
        self.where = place(conninfo)
        self._setup = setup
        self.pool: ConnectionPool[Connection] = ConnectionPool(
            conninfo,
            min_size=1,
            max_size=max(size, 1),
            timeout=timeout,
            name=name,
            open=False,
            reconnect_timeout=RECONNECT_TIMEOUT,
            connection_class=connection_class,
            # Our statements are few and run again and again: prepare each at once.
            kwargs={"autocommit": True, "prepare_threshold": 0},
        )
        self._pid = os.getpid()
        self.pool.open(wait=False)
        _OPEN.add(self)

    # --- one try -------------------------------------------------------------------------

    @contextmanager
    def _connection(self) -> Iterator[Connection]:
        """A live pooled connection, with the setup done; driver errors go to the caller.

        While the pool's attempts to connect fail, a call waits for a
        connection no more than `DOWN_WAIT` (see `_getconn`).
        """
        with POOL_LOG.ours(self.name):
            conn = self._getconn()
            try:
                for _ in range(self.pool.max_size):
                    if not _closed_by_server(conn):
                        break
                    conn.close()  # the pool replaces a closed connection when it comes back
                    self.pool.putconn(conn)
                    conn = self._getconn()
                if self._setup is not None:
                    self._setup(conn)
                    self._setup = None
                yield conn
            finally:
                self.pool.putconn(conn)

    def _getconn(self) -> Connection:
        """A connection of the pool, waited for up to `timeout`, or `PoolTimeout`.

        The wait is taken `DOWN_WAIT` at a time; it ends early, after the
        slice in which the pool's attempts to connect were failing: the
        server is away, and the caller had better report an outage than wait.
        """
        deadline = time.monotonic() + self.timeout
        while True:
            failing = POOL_LOG.failing(self.name) is not None
            try:
                conn = self.pool.getconn(max(min(DOWN_WAIT, deadline - time.monotonic()), 0.0))
            except PoolTimeout:
                if failing or POOL_LOG.failing(self.name) is not None:
                    raise
                if time.monotonic() >= deadline:
                    raise
                continue
            POOL_LOG.reached(self.name)
            return conn

    def attempt(self, statement: str, params: Params | None, what: str) -> Rows:
        """Run one statement once; its rows (binary: bytea as bytes, bigint as int).

        Raises `Failure` for an outage or a rollback, `PostgresBackendError`
        for a refusal, and lets any other exception through.
        """
        sent = False
        try:
            with self._connection() as conn:
                sent = True
                cursor = conn.execute(statement, params, binary=True)
                return cursor.fetchall() if cursor.description is not None else []
        except psycopg.Error as exc:
            failure = classify(exc, sent=sent)
            if failure is None:
                raise refused(exc, what) from exc
            raise failure from exc

    # --- calls with repeats ----------------------------------------------------------------

    def fetch(
        self, statement: str, params: Params | None = None, *, what: str, repeatable: bool
    ) -> Rows:
        """`attempt`, repeated after a failure that applied nothing, or (if `repeatable`) any.

        Raises `PostgresUnavailable` once the repeats are spent, or at once for a
        call that may have been applied and is not `repeatable`.
        """
        for attempt in range(REPEATS + 1):
            try:
                return self.attempt(statement, params, what)
            except Failure as failure:
                if attempt == REPEATS or (failure.maybe_applied and not repeatable):
                    raise self.unavailable(failure, what) from failure.cause
                log.debug("%s: %s; repeating the call", what, failure)
                time.sleep(0.05 * 2**attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def transaction(
        self, block: Callable[[Connection], T], *, what: str, repeatable: bool = False
    ) -> T:
        """Run `block(conn)` in one transaction and commit; its result.

        A driver error before the COMMIT was sent rolled everything back, so
        the block runs again (up to `REPEATS` times); one during the COMMIT
        raises `PostgresUnavailable` (the outcome is unknown), unless the
        caller says a repeat is recognised (`repeatable`): then the block
        runs again too. An exception of the block's own (not the driver's)
        rolls back and goes to the caller as it is.
        """
        for attempt in range(REPEATS + 1):
            committing = False
            try:
                with self._connection() as conn, conn.transaction():
                    result = block(conn)
                    committing = True
                return result
            except psycopg.Error as exc:
                failure = classify(exc, sent=committing)
                if failure is None:
                    raise refused(exc, what) from exc
                if attempt == REPEATS or (failure.maybe_applied and not repeatable):
                    raise self.unavailable(failure, what) from exc
                log.debug("%s: %s; repeating the transaction", what, failure)
                time.sleep(0.05 * 2**attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def unavailable(self, failure: Failure, what: str) -> PostgresUnavailable:
        """The error for a call that failed for good: where, during what, whether it may
        have been applied, and why (for a pool with no connection, its last attempt's error)."""
        maybe = " (the change may or may not have been applied)" if failure.maybe_applied else ""
        why = first_line(failure)
        last = POOL_LOG.failing(self.name)
        if isinstance(failure.cause, PoolTimeout) and last is not None:
            why = f"no connection to be had; the last attempt: {last}"
        return PostgresUnavailable(
            f"PostgreSQL unavailable at {self.where} during {what}{maybe}: {why}"
        )

    def close(self, timeout: float = 5.0) -> None:
        """Close the pool, waiting up to `timeout` seconds for each of its threads to stop."""
        _OPEN.discard(self)
        with POOL_LOG.ours(self.name):
            self.pool.close(timeout)


#: Pools opened and not yet closed (by this process or, after a fork, its parent).
_OPEN: weakref.WeakSet[Database] = weakref.WeakSet()

#: Seconds `close_open_pools` waits for each thread of a pool (they stop in milliseconds).
EXIT_TIMEOUT = 1.0


@atexit.register
def close_open_pools() -> None:
    """Close the pools this process opened and left open, while their threads can still stop.

    Without it psycopg_pool stops a forgotten pool from its finalizer, during
    interpreter shutdown, where Python 3.13 no longer runs daemon threads:
    it waits five seconds for each of the pool's four threads and warns each
    time, so every short-lived producer took 20 s to exit. `atexit` handlers
    run before that, while the threads still run. A forked child leaves its
    parent's pools alone: closing one would end the parent's sessions on the
    sockets they share.
    """
    for database in list(_OPEN):
        if database._pid == os.getpid():
            database.close(EXIT_TIMEOUT)


def _closed_by_server(conn: Connection) -> bool:
    """Whether an idle connection is known dead: closed, or its socket has something to read.

    Idle, these connections are sent nothing (they never LISTEN), but for the
    error the server sends as it closes one, and the end of the stream. A
    poll with no timeout costs no round trip.
    """
    if conn.closed:
        return True
    try:
        fileno = conn.fileno()
        if hasattr(select, "poll"):  # no limit on descriptor numbers, unlike select()
            poller = select.poll()
            poller.register(fileno, select.POLLIN)
            return bool(poller.poll(0))
        readable, _, _ = select.select([fileno], [], [], 0)
    except (OSError, ValueError, psycopg.Error):
        return True
    return bool(readable)
