"""Exceptions of the PostgreSQL backend; driver errors become these at one boundary.

That boundary is `threadmill_postgres.connection` (and the schema setup it
runs): no `psycopg.Error` reaches a caller of the backend, and each of these
keeps the driver's exception as its `__cause__`.
"""

from __future__ import annotations

from threadmill_core.errors import BackendUnavailable, ThreadmillError


class PostgresBackendError(ThreadmillError):
    """PostgreSQL refused or failed a statement (the driver's exception is the `__cause__`).

    A refusal that waiting will not cure: a missing privilege, a schema that
    was dropped under the backend, a statement PostgreSQL rejected.
    """


class PostgresUnavailable(PostgresBackendError, BackendUnavailable):
    """PostgreSQL could not be reached, or a connection dropped before the reply arrived.

    Also raised while a restarted server is still starting up or recovering,
    when the server has no connection slot left, when a call waited longer
    than the pool's timeout for a connection, and on a standby that cannot
    take writes. For an operation whose repeat is not recognised (`cancel`,
    `requeue`, `purge`, `claim_expired`), the change may or may not have been
    applied, but only when the connection dropped during its commit.
    """


class SchemaVersionError(PostgresBackendError):
    """The namespace's schema was made by a threadmill this one cannot work with.

    `found` is the schema's version and `oldest` the oldest code version it
    still serves; `known` is the newest version this code knows. Raised when
    connecting, before anything is read or written.
    """

    def __init__(self, schema: str, found: int, oldest: int, known: int) -> None:
        self.schema = schema
        self.found = found
        self.oldest = oldest
        self.known = known
        super().__init__(
            f"schema {schema!r} is at threadmill_postgres schema version {found}, which "
            f"code older than version {oldest} cannot use; this code knows versions up to "
            f"{known}: upgrade threadmill on this machine"
        )


class NamespaceNotFound(PostgresBackendError, LookupError):
    """The namespace has no schema in the database, and the backend was told to make none.

    `namespace` is the one asked for; `found` the namespaces the database
    holds (sorted), so a misspelt name is easy to see.
    """

    def __init__(self, namespace: str, database: str, found: list[str]) -> None:
        """`database`: where it was looked for, credentials masked."""
        self.namespace = namespace
        self.found = found
        there = ", ".join(found) if found else "none"
        super().__init__(
            f"namespace {namespace!r} does not exist in {database} "
            f"(namespaces there: {there}); check the URL's namespace= (default 'threadmill')"
        )
