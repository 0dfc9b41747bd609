"""`PostgresBackend.enqueue_on`: new tasks written in a transaction of the caller's, a mixin.

A caller with a transaction open on the same database (a web framework's
connection, say) stores tasks through it, so they commit or roll back with
its other writes: the same statements as `enqueue`, run on that connection,
with no BEGIN, COMMIT or repeat of their own. PostgreSQL makes the rest
hold: the rows are invisible to every worker until the COMMIT; the wake-up
(``pg_notify``) is delivered at the COMMIT, and never if it rolls back; a
savepoint rolled back takes its tasks with it.

The namespace's schema is made (or checked) beforehand on one of the
backend's own connections, never in the caller's transaction, where a
rollback would take it away again.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import tuple_row

from threadmill_core.models import TaskResult
from threadmill_postgres.connection import UNAVAILABLE, refused
from threadmill_postgres.errors import PostgresBackendError, PostgresUnavailable
from threadmill_postgres.options import place
from threadmill_postgres.pool_log import first_line

if TYPE_CHECKING:
    from threadmill_postgres.connection import Database, Params, Rows
    from threadmill_postgres.producing import Enqueuer, Run
    from threadmill_postgres.queries import Statements


class PostgresTransactional:
    """`enqueue_on` for `PostgresBackend`, which mixes this in."""

    if TYPE_CHECKING:
        db: Database
        sql: Statements
        _ready: bool
        _enqueuer: Enqueuer

    def enqueue_on(
        self, conn: psycopg.Connection[Any], records: Sequence[TaskResult]
    ) -> list[TaskResult]:
        """`enqueue` run on `conn`, in whatever transaction it has open; the stored records.

        `conn` is a psycopg 3 connection to the database this backend uses;
        one to any other database raises `PostgresBackendError` naming both,
        before anything is written (checked once per connection: one round
        trip, see `_check_same_database`).
        Everything `enqueue` promises holds (records checked and encoded
        before anything is sent, idempotent on id, the stored records
        returned in order), except the commit, which is the caller's: the
        tasks are claimable once `conn`'s transaction commits, and are never
        stored if it (or the savepoint they were written in) rolls back.
        On an autocommit connection outside a transaction each statement
        commits at once, as `enqueue` does.

        Nothing is sent again: a statement the server refuses raises
        `PostgresBackendError` (so does a deadlock or serialization failure
        of `conn`'s transaction), a lost connection `PostgresUnavailable`,
        and either leaves `conn`'s transaction to the caller (aborted, as
        after any failed statement: roll it, or its savepoint, back). The
        statements use a cursor of their own (server-side parameters,
        binary rows), whatever cursor class `conn` makes by default.
        """
        if not self._ready:  # made on the backend's own connection, committed there
            self.db.fetch(self.sql.now, what="enqueue_on: set up the schema", repeatable=True)
        self._check_same_database(conn)
        return self._enqueuer.enqueue_with(records, _runner(conn))

    def _check_same_database(self, conn: psycopg.Connection[Any]) -> None:
        """Refuse a connection to another database than the backend's, before writing on it.

        Compared by the database's name, the server's port and its start
        time, which together tell one server's database from every other (a
        host name does not: one server has many names). Each is read once
        per connection and per backend (again after a mismatch: the server
        may have restarted since), so a connection costs one round trip.
        """
        theirs = _IDENTITIES.get(conn)
        if theirs is None:
            (row,) = _runner(conn)(IDENTITY, {})
            theirs = _IDENTITIES[conn] = tuple(row)
        ours = _IDENTITIES.get(self)
        if ours != theirs:
            (row,) = self.db.fetch(IDENTITY, what="enqueue_on: identify", repeatable=True)
            ours = _IDENTITIES[self] = tuple(row)
        if ours != theirs:
            raise PostgresBackendError(
                f"enqueue_on: the connection is on database {theirs[0]!r} of the server on port "
                f"{theirs[1]} started at epoch {theirs[2]}, not on the backend's, {ours[0]!r} "
                f"on port {ours[1]} started at epoch {ours[2]}: nothing was written"
            )


#: A database's identity: its name, its server's port and start time (as text: no time zone).
IDENTITY = (
    "SELECT current_database()::text, current_setting('port'), "
    "extract(epoch FROM pg_postmaster_start_time())::text"
)

#: The identity of each backend's database, and of each connection checked against one.
_IDENTITIES: weakref.WeakKeyDictionary[object, tuple[Any, ...]] = weakref.WeakKeyDictionary()


def _runner(conn: psycopg.Connection[Any]) -> Run:
    """A `Run` on the caller's `conn`: its own cursor; no repeat; errors translated."""

    def run(statement: str, params: Params) -> Rows:
        try:
            cursor = psycopg.Cursor(conn, row_factory=tuple_row)
            with cursor:
                cursor.execute(statement, params, binary=True)
                return cursor.fetchall() if cursor.description is not None else []
        except psycopg.Error as exc:
            if not isinstance(exc, UNAVAILABLE):
                raise refused(exc, "enqueue_on") from exc
            raise PostgresUnavailable(
                f"PostgreSQL unavailable at {place(conn.info.dsn)} during enqueue_on "
                f"(the caller's transaction decides what was stored): {first_line(exc)}"
            ) from exc

    return run
