"""Every SQL statement the backend runs, by name, read from the files of ``sql/queries/``.

The files. Each ``.sql`` file of ``sql/queries/`` holds the queries of one
job (producing, working, maintenance, inspection, operator, schedules,
live_workers). A query starts at a line ``-- name: <name> --``; the comment
lines right after it document it (what it does, its parameters, its rows)
and are not sent; the SQL follows, up to the next ``-- name:`` line, and
ends with ``;`` (dropped when sent). Every query is written out in full: no
fragment is shared or spliced in, so what the file says is what PostgreSQL
runs. The files are read once, at import, into `QUERIES`; `Statements.of`
fills in a namespace's schema once per backend.

Placeholders. ``{schema}`` is the namespace's schema: every table, the
``now_ms()`` function and the ``ready_order`` sequence are named through it
(``{schema}.tasks``), and `fill` replaces it with the schema's name quoted
by ``psycopg.sql.Identifier``. A plain replacement of that one placeholder,
not ``psycopg.sql.SQL.format``, because format would read every other brace
as a placeholder too, so the files would need ``'{{}}'`` for an empty array
and would no longer paste as written. Not ``search_path`` either:
`PostgresBackend.enqueue_on` runs the same statements on a caller's
connection, whose ``search_path`` is the caller's. Parameters are psycopg's
``%(name)s``.

Pasting into psql. ``backend.sql.<name>`` is the text as sent, schema
filled in; psycopg's client-side binding gives it with values substituted,
ready to paste (in a transaction rolled back: most of them write)::

    import psycopg
    text = psycopg.ClientCursor(conn).mogrify(backend.sql.claim, params)
    # psql: BEGIN; EXPLAIN (ANALYZE, BUFFERS) <text>; ROLLBACK;

By hand, replace ``{schema}`` with the namespace's name in double quotes
and each ``%(name)s`` with a literal (``'{a,b}'::text[]`` for an array).

Conventions, which every query keeps:

- Arrays are unnested ``WITH ORDINALITY``, so ``n`` is each item's place in
  the call, and answers come back ordered by it.
- ``now`` is the one clock reading, ``{schema}.now_ms()`` (the database's
  clock at the transaction's start), made once per statement.
- Each state change is one statement, run in autocommit mode, so it is one
  transaction and one commit however many tasks it touches: a data-modifying
  ``WITH`` query whose parts lock, change, count and announce together. The
  operator's rarer actions (``requeue``, ``cancel``, ``purge``) lock and read
  in one statement and change in another, inside one explicit transaction,
  because the record must be decoded in Python before anything changes.
- Tokens are checked in the statement that applies the change, against the
  row as locked: ``FOR UPDATE`` waits for a change in flight and then sees
  its result. Rows that several workers compete for (READY, due DEFERRED,
  expired RUNNING) are taken with ``SKIP LOCKED``; rows a caller names by id
  are locked in id order, so two batches can never deadlock on each other.
- Entering READY draws from the ``ready_order`` sequence. Several tasks
  entering in one statement draw in a ``<name>_drawn`` / ``<name>`` pair of
  CTEs: the values drawn are sorted and handed out in the order the protocol
  gives (call order, DEFERRED order), which does not depend on the order the
  planner evaluates rows in.
- A statement that makes a task READY (or stores one) sends a NOTIFY on the
  namespace's channel (``%(channel)s``) with the queue name (its first 1,000
  characters) as the payload; PostgreSQL delivers it at commit, once per
  queue and transaction.
- Telemetry (``rates``) is counted by the statement that makes the change,
  on a row of its own server process (``pg_backend_pid()``), so counting
  never makes two connections wait for each other; the same statement
  deletes up to four rows older than `RATE_HISTORY_S` (``rates_trimmed``).
- Results past ``%(ttl)s`` are invisible to every read at once and deleted,
  oldest first, ``%(prune)s`` at a time by the statements that finish tasks
  and by ``promote_due`` (``expired``).
- A task's columns are read in the order of `rows.TASK_COLUMNS`; a stored
  time outside `rows.MIN_MS` .. `rows.MAX_MS` is corrupt. Both are written
  out as literals, and tests/postgres/test_queries.py checks them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType
from typing import Any

import attrs
from psycopg import sql

from threadmill_core.backend import RATE_HISTORY
from threadmill_core.clock import duration_ms

#: Seconds of telemetry kept (see `threadmill_core.backend.RATE_HISTORY`).
RATE_HISTORY_S = duration_ms(RATE_HISTORY) // 1000

#: A query's first line.
_HEADER = re.compile(r"^-- name: ([a-z_]+) --$", re.MULTILINE)


def parse(text: str) -> dict[str, str]:
    """The queries of one file's `text`, by name: each one's SQL, its documentation left out.

    Raises `ValueError` for a name given twice or a query with no SQL.
    """
    found: dict[str, str] = {}
    parts = _HEADER.split(text)  # [preamble, name, body, name, body, ...]
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = body.strip().splitlines()
        while lines and (lines[0].startswith("--") or not lines[0].strip()):
            lines.pop(0)  # the query's documentation
        statement = "\n".join(lines).rstrip().removesuffix(";").rstrip()
        if name in found or not statement:
            raise ValueError(f"query {name!r}: given twice, or without SQL")
        found[name] = statement
    return found


def load() -> dict[str, str]:
    """Every query of the package's ``sql/queries/*.sql`` files, by name."""
    found: dict[str, str] = {}
    folder = resources.files("threadmill_postgres").joinpath("sql/queries")
    for entry in sorted(folder.iterdir(), key=lambda entry: entry.name):
        if entry.name.endswith(".sql"):
            for name, statement in parse(entry.read_text(encoding="utf-8")).items():
                if name in found:
                    raise ValueError(f"query {name!r} is named in two files")
                found[name] = statement
    return found


#: Every query, by name, with ``{schema}`` still in it: read once, at import.
QUERIES: Mapping[str, str] = MappingProxyType(load())


def fill(text: str, schema: str) -> str:
    """`text` with ``{schema}`` replaced by `schema` quoted as an identifier."""
    return text.replace("{schema}", sql.Identifier(schema).as_string())


#: The segments `peek` reads and `purge` empties, by status.
_PEEKED = ("READY", "DEFERRED", "RUNNING", "SUCCESSFUL", "FAILED", "CANCELLED")
_PURGED = ("READY", "DEFERRED", "SUCCESSFUL", "FAILED", "CANCELLED")


@attrs.frozen(kw_only=True)
class Statements:
    """Every query, with the schema of one namespace filled in; each attribute is the query
    of that name (see its file for what it does, its parameters and its rows)."""

    # sql/queries/producing.sql
    enqueue: str
    # sql/queries/working.sql
    claim: str
    claim_burn: str
    claim_found: str
    extend_many: str
    mark_started: str
    record_progress: str
    decide_many: str
    release: str
    quarantine: str
    # sql/queries/maintenance.sql
    claim_expired: str
    expire_leases: str
    promote_due: str
    next_due: str
    has_work: str
    # sql/queries/inspection.sql
    now: str
    get: str
    counts: str
    rates: str
    #: ``peek_<status>``, by status (in capitals).
    peek: Mapping[str, str]
    # sql/queries/operator.sql
    requeue_lock: str
    requeue: str
    request_cancel: str
    cancel_lock: str
    cancel: str
    #: ``purge_<status>``, by status (in capitals): every segment but RUNNING.
    purge: Mapping[str, str]
    # sql/queries/schedules.sql
    set_schedule_paused: str
    schedule_pauses: str
    # sql/queries/live_workers.sql
    register_worker: str
    unregister_worker: str
    workers: str

    @classmethod
    def of(cls, schema: str) -> Statements:
        """Every query of `QUERIES` for the namespace whose schema is `schema`.

        A query no attribute takes, or an attribute no query fills, raises
        `TypeError`: the files and this class name the same queries.
        """
        named: dict[str, Any] = {name: fill(text, schema) for name, text in QUERIES.items()}
        peek = {status: named.pop(f"peek_{status.lower()}") for status in _PEEKED}
        purge = {status: named.pop(f"purge_{status.lower()}") for status in _PURGED}
        return cls(peek=MappingProxyType(peek), purge=MappingProxyType(purge), **named)
