"""The schema of one namespace: created on first use, versioned, upgraded in place.

Every namespace is a schema of its own, named after it (see
`options.check_namespace`), holding the tables that ``sql/v1.sql``
describes. Two namespaces in one database share nothing but the database's
sequence of transaction ids: no table, no row, no wake-up channel.

Versions and upgrades. ``meta`` holds two numbers: ``version``, the schema
version the namespace is at, and ``oldest_compatible``, the oldest code
version that may still use it. A backend reads them when it connects:

- no schema yet: it applies every step of `MIGRATIONS` in one transaction;
- an older version: it applies the missing steps, in order, in one
  transaction, and records the new numbers (an upgrade in place);
- the version it knows, or a newer one whose ``oldest_compatible`` is not
  above the version it knows: it uses the schema as it is;
- a newer one that this code is too old for: `SchemaVersionError`, before
  anything is read or written.

Setup and upgrade hold a transaction-level advisory lock on the namespace's
name, so processes that start together create or upgrade it exactly once,
and the others wait for that and then find it done. A step that only adds
(a column with a default, an index, a table) leaves ``oldest_compatible``
where it was, so workers of the older version go on working beside newer
ones during a rolling upgrade; a step that older code could not live with
raises it, and older workers then refuse to start (running ones fail their
statements) until they are upgraded. docs/operations.md says how to upgrade.
"""

from __future__ import annotations

import hashlib
from importlib import resources

import attrs
import psycopg

from threadmill_postgres.errors import SchemaVersionError


@attrs.frozen
class Migration:
    """One step: the SQL that brings a namespace from `version` - 1 to `version`."""

    version: int
    #: The oldest code version that may use the schema once this step is applied.
    oldest_compatible: int
    #: The SQL, with ``{schema}`` where the quoted schema name goes.
    sql: str


def _step(version: int, oldest_compatible: int) -> Migration:
    text = resources.files("threadmill_postgres").joinpath(f"sql/v{version}.sql")
    return Migration(version, oldest_compatible, text.read_text(encoding="utf-8"))


#: Every step, oldest first; the last one's version is `VERSION`.
MIGRATIONS: tuple[Migration, ...] = (_step(1, 1), _step(2, 1), _step(3, 1), _step(4, 1))

#: The schema version this code creates and works with.
VERSION = MIGRATIONS[-1].version


def quote_ident(name: str) -> str:
    """`name` as an SQL identifier: in double quotes, inner quotes doubled (PostgreSQL's rule)."""
    return '"' + name.replace('"', '""') + '"'


def channel(namespace: str) -> str:
    """The LISTEN/NOTIFY channel of a namespace, short enough for any name (63 bytes at most).

    Channels are database-wide, so the name is derived from the namespace
    and starts with ``threadmill_`` to keep clear of other listeners'.
    """
    digest = hashlib.blake2b(namespace.encode(), digest_size=16).hexdigest()
    return f"threadmill_{digest}"


def _lock_key(namespace: str) -> int:
    """The advisory lock key of a namespace's setup: 64 bits of a hash of its name."""
    digest = hashlib.blake2b(f"threadmill schema {namespace}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _versions(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> tuple[int, int] | None:
    """(version, oldest_compatible) of the namespace's schema; None if it has none yet."""
    quoted = quote_ident(schema)
    # The catalog read as a table, with this statement's snapshot: to_regclass()
    # answers from a cache that a wait for the advisory lock does not refresh.
    exists = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c"
        " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relname = 'meta')",
        (schema,),
    ).fetchone()
    if not exists or not exists[0]:
        return None
    meta = conn.execute(f"SELECT name, value FROM {quoted}.meta").fetchall()
    rows = {row[0]: row[1] for row in meta}
    version, oldest = rows.get("version"), rows.get("oldest_compatible")
    if not isinstance(version, int) or not isinstance(oldest, int):
        return None
    return version, oldest


def ensure(
    conn: psycopg.Connection[tuple[object, ...]],
    schema: str,
    migrations: tuple[Migration, ...] = MIGRATIONS,
) -> int:
    """Create or upgrade `schema` as `migrations` say; return the version it is at.

    `conn` is in autocommit mode; the work is one transaction. Raises
    `SchemaVersionError` for a schema this code is too old for, and lets
    driver errors through (the caller translates them).
    """
    known = migrations[-1].version
    found = _versions(conn, schema)  # the usual case, answered without a lock
    if found is not None and found[0] >= known:
        _check(schema, *found, known)
        return found[0]
    quoted = quote_ident(schema)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(schema),))
        found = _versions(conn, schema)  # again: another process may have done it meanwhile
        if found is not None and found[0] >= known:
            _check(schema, *found, known)
            return found[0]
        at = 0 if found is None else found[0]
        oldest = 0 if found is None else found[1]
        for step in migrations:
            if step.version <= at:
                continue
            conn.execute(step.sql.replace("{schema}", quoted))
            oldest = max(oldest, step.oldest_compatible)
            at = step.version
        conn.execute(
            f"INSERT INTO {quoted}.meta (name, value) VALUES ('version', %s), "
            "('oldest_compatible', %s) ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
            (at, oldest),
        )
    return at


def namespaces(conn: psycopg.Connection[tuple[object, ...]]) -> list[str]:
    """The namespaces of the database: schemas holding a ``meta`` and a ``tasks`` table."""
    found = conn.execute(
        "SELECT n.nspname FROM pg_catalog.pg_namespace n WHERE"
        " EXISTS (SELECT 1 FROM pg_catalog.pg_class c"
        "         WHERE c.relnamespace = n.oid AND c.relname = 'meta')"
        " AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c"
        "             WHERE c.relnamespace = n.oid AND c.relname = 'tasks')"
        " ORDER BY 1"
    ).fetchall()
    return [str(row[0]) for row in found]


def exists(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> bool:
    """Whether `schema` holds a namespace made by threadmill (any version)."""
    return _versions(conn, schema) is not None


def _check(schema: str, version: int, oldest: int, known: int) -> None:
    if oldest > known:
        raise SchemaVersionError(schema, version, oldest, known)
