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

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import tuple_row

from threadmill_core.models import TaskResult
from threadmill_postgres.connection import UNAVAILABLE, refused
from threadmill_postgres.errors import PostgresUnavailable
from threadmill_postgres.options import place
from threadmill_postgres.pool_log import first_line

if TYPE_CHECKING:
    from threadmill_postgres.connection import Database, Params, Rows
    from threadmill_postgres.producing import Enqueuer
    from threadmill_postgres.statements import Statements


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

        `conn` is a psycopg 3 connection to the database this backend uses
        (not checked: a connection elsewhere stores the tasks where no
        worker of this backend looks, or fails for want of the schema).
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

        return self._enqueuer.enqueue_with(records, run)
