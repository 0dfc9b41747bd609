"""`PostgresBackend`: the storage interface on PostgreSQL, one statement per state change.

Each method runs the query of the same name (see `queries`: the named
queries of ``sql/queries/*.sql``; a batch of many tasks is one statement and
one commit), reads its rows through `rows`, and lets no driver exception
through: `connection.Database` is the one boundary where they become
`PostgresBackendError` / `PostgresUnavailable` (the core's
`BackendUnavailable`, which workers ride out with a backoff). The methods
live by job in mixins: `claiming` (claims and the reaper's claims),
`leases` (renewals, decisions, releases), `inspection` (reads and operator
actions), `pauses`, `live_workers` and `transactional` (`enqueue_on`);
this module builds the backend and holds the rest.

Where things are. A namespace is a schema of its own in the database the URL
names (see `schema`): its tasks, claim receipts and telemetry. Processes on
one namespace share its tasks; two namespaces share nothing. The clock is
the database's (``now()`` at each statement's start, in milliseconds):
deadlines, due times and timestamps never come from a client's clock.

Lost replies. A call whose reply was lost when the connection dropped is
sent again where its repeat is recognised: `complete`, `retry` and
`decide_many` (the token is kept after a decision, so a repeat finds its own
outcome and answers as the first time), `extend`, `extend_many` and
`mark_started`,
`enqueue` (idempotent on id), `release` (the first send cleared the
tokens, so a repeat changes nothing), `promote_due` and `claim_expired`
(each takes only what is due or expired now; a reaper claim whose reply was
lost lapses and is taken up again, and is not an attempt; a give-back
cleared the token, so a repeat changes nothing), and the reads.
A `claim` is repeated through its receipt (see `claiming`):
the leases its first send granted are found and returned, or that send is
made void, so no task is claimed by a reply nobody read. `requeue`,
`cancel` and `purge` run in explicit transactions, sent again after a
failure before their COMMIT; a connection lost during the COMMIT raises
`PostgresUnavailable`.

Idle workers block on `LISTEN` (see `listener`): no polling loop.

Poison. A stored payload (or errors, or result) that does not decode is
never returned from `claim` or `claim_expired`: it is finalized FAILED with
a `TaskQuarantined` error and a readable stand-in payload, and the claim
takes more in its place. `get`, `peek`, `cancel`, `requeue` and `enqueue`
of such an id raise `PayloadError` naming the task; `counts`, `purge` and
`promote_due` never decode.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import psycopg

from threadmill_core.backend import NOTHING_DEFERRED, RATE_HISTORY, Backend
from threadmill_core.checks import check_limit, queue_names
from threadmill_core.clock import duration_ms, from_ms
from threadmill_core.errors import InvalidOption
from threadmill_core.models import QueueRates, TaskResult
from threadmill_core.urls import redact
from threadmill_postgres import rows, schema
from threadmill_postgres.claiming import PostgresClaims
from threadmill_postgres.connection import Connection, Database
from threadmill_postgres.errors import NamespaceNotFound, PostgresBackendError, PostgresUnavailable
from threadmill_postgres.inspection import PostgresInspection
from threadmill_postgres.leases import PostgresLeases
from threadmill_postgres.listener import Listener
from threadmill_postgres.live_workers import PostgresLiveWorkers
from threadmill_postgres.options import PostgresOptions, place, split_url
from threadmill_postgres.pauses import PostgresPauses
from threadmill_postgres.pool_log import first_line
from threadmill_postgres.producing import Enqueuer
from threadmill_postgres.queries import RATE_HISTORY_S, Statements
from threadmill_postgres.transactional import PostgresTransactional

log = logging.getLogger("threadmill_postgres")


class PostgresBackend(
    PostgresClaims,
    PostgresLeases,
    PostgresInspection,
    PostgresPauses,
    PostgresLiveWorkers,
    PostgresTransactional,
    Backend,
):
    """Tasks stored in PostgreSQL, in the schema of one namespace (see `schema`).

    `conninfo` is what libpq connects with: a ``postgresql://`` URL without
    threadmill's options, or ``"host=... dbname=..."``; `from_url` takes a
    URL with them. Options are those of `PostgresOptions`; besides them,
    `connection_class` (a `psycopg.Connection` subclass, for tracing say) is
    what the pool makes its connections with.

    Building one connects once: refused credentials and a missing database
    raise `InvalidOption`, a schema this code is too old for raises
    `SchemaVersionError`, and the schema is created (or upgraded) if need
    be. A server that cannot be reached is not an error: the schema is then
    made by the first call that gets through. With `create_schema` False
    (what the inspecting commands pass) a namespace without a schema is not
    made but raises `NamespaceNotFound`, naming those the database holds,
    and a server that cannot be reached raises `PostgresUnavailable` at once.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        connection_class: type[Connection] = psycopg.Connection,
        create_schema: bool = True,
        **options: object,
    ) -> None:
        self.options = PostgresOptions.from_mapping(options)
        self.namespace = self.options.namespace
        self.channel = schema.channel(self.namespace)
        self.sql = Statements.of(self.namespace)
        self._ttl_ms = duration_ms(self.options.result_ttl)
        self._conninfo = conninfo
        self._ready = False
        self._create_schema = create_schema
        # Before the pool opens: a URL that cannot work is then one error, not also
        # the warning of a pool whose first connection failed.
        self._connect()
        self.db = Database(
            conninfo,
            size=self.options.pool_size,
            timeout=self.options.pool_timeout.total_seconds(),
            name=f"threadmill:{self.namespace}",
            connection_class=connection_class,
            setup=self._setup,
        )
        self._enqueuer = Enqueuer(
            self.db, self.sql, self._ttl_ms, self.channel, self.options.enqueue_batch
        )
        self._listener: Listener | None = None
        self._listener_lock = threading.Lock()
        self._marks = threading.local()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> PostgresBackend:
        """Build from a ``postgresql://`` or ``postgres://`` URL.

        threadmill's options come from the query string or keywords; other
        query parameters go to libpq (``sslmode``, ``connect_timeout``, ...);
        credentials go in the URL (``postgresql://user:password@host/db``).
        """
        connection_class = options.pop("connection_class", psycopg.Connection)
        create_schema = bool(options.pop("create_schema", True))
        ours, conninfo = split_url(url, options)
        return cls(conninfo, connection_class=connection_class, create_schema=create_schema, **ours)

    def __repr__(self) -> str:
        return f"PostgresBackend({redact(self._conninfo)!r}, namespace={self.namespace!r})"

    @property
    def conninfo(self) -> str:
        """What libpq connects with (a URL without threadmill's options, or key=value pairs)."""
        return self._conninfo

    # --- setup -----------------------------------------------------------------------------

    def _connect(self) -> None:
        """Connect once now, to refuse what cannot work and make the schema (see the class doc)."""
        try:
            with psycopg.connect(self._conninfo, autocommit=True) as conn:
                self._setup(conn)
        except psycopg.OperationalError as exc:
            text = str(exc).strip()
            if any(sign in text for sign in _HOPELESS):
                raise InvalidOption(f"PostgreSQL refused the connection: {text}") from exc
            if not self._create_schema:  # told to find the namespace, and it cannot look
                raise PostgresUnavailable(
                    f"PostgreSQL unavailable at {place(self._conninfo)}: {first_line(exc)}"
                ) from exc
            log.debug("PostgreSQL is not reachable now (%s); calls will wait for it", text)
        except psycopg.Error as exc:
            raise PostgresBackendError(
                f"could not set up schema {self.namespace!r}: {exc}"
            ) from exc

    def _setup(self, conn: Connection) -> None:
        if not self._ready:
            if not self._create_schema and not schema.exists(conn, self.namespace):
                where = place(self._conninfo)
                raise NamespaceNotFound(self.namespace, where, schema.namespaces(conn))
            schema.ensure(conn, self.namespace)
            self._ready = True

    # --- the clock -------------------------------------------------------------------------

    def now(self) -> datetime:
        (row,) = self.db.fetch(self.sql.now, what="now", repeatable=True)
        return from_ms(row[0])

    # --- producing -------------------------------------------------------------------------

    def enqueue(self, records: Sequence[TaskResult]) -> list[TaskResult]:
        """Store new tasks, all of a batch or none (see `producing`).

        Every record is checked and encoded before anything is sent. A batch
        of up to `enqueue_batch` tasks is one statement; a longer one is one
        statement per slice, all in one transaction, so a failure of any
        slice stores nothing of the batch.
        """
        return self._enqueuer.enqueue(records)

    # --- waiting ---------------------------------------------------------------------------

    def wait_for_tasks(self, queues: Sequence[str], timeout: timedelta) -> bool:
        """Block on the namespace's LISTEN connection until a queue of `queues` is woken.

        A wake-up that came after this thread's last `claim` began ends the
        wait at once (see `listener.Listener.wait`); so does `close`. An idle
        wait sends no statement; the first wait of a thread, and any after the
        connection was made again, take one look at the table instead.
        """
        names = [name for name in queue_names(queues) if rows.storable(name)]
        if not names:  # nothing could wake us; returning at once would let a caller spin
            time.sleep(max(timeout.total_seconds(), 0.0))
            return False
        listener = self._listen()
        since = getattr(self._marks, "mark", None)
        woken = listener.wait(names, since, max(timeout.total_seconds(), 0.0))
        if woken:  # taken: the next wait counts only wake-ups from here on
            self._marks.mark = listener.mark()
        return woken

    def _listen(self) -> Listener:
        with self._listener_lock:
            if self._listener is None:
                self._listener = Listener(
                    self._conninfo, self.channel, self._has_work, self._wake_listener
                )
            return self._listener

    def _has_work(self, queues: Sequence[str]) -> bool:
        (row,) = self.db.fetch(
            self.sql.has_work, {"queues": list(queues)}, what="wait", repeatable=True
        )
        return bool(row[0])

    def _wake_listener(self) -> None:
        self.db.attempt("SELECT pg_notify(%(channel)s, '')", {"channel": self.channel}, "close")

    def next_due(self) -> timedelta | None:
        """One read of the index of due times: how long until the earliest DEFERRED task is due."""
        (row,) = self.db.fetch(self.sql.next_due, what="next_due", repeatable=True)
        if row[0] is None:
            return NOTHING_DEFERRED
        return timedelta(milliseconds=max(int(row[0]), 0))

    # --- maintenance -----------------------------------------------------------------------

    def expire_leases(self, worker: str) -> int:
        """One statement (``expire_leases``, a walk of the RUNNING index by deadline: no index
        by worker, which every claim and decision would have to keep up); repeated after a
        lost reply (a repeat finds nothing left to expire)."""
        if not rows.storable(worker):
            return 0  # no claim can have stored it
        statement = self.sql.expire_leases
        (row,) = self.db.fetch(statement, {"worker": worker}, what="expire_leases", repeatable=True)
        return int(row[0])

    def promote_due(self, *, limit: int) -> int:
        check_limit(limit)
        params = {
            "limit": limit,
            "ttl": self._ttl_ms,
            "prune": self.options.prune_batch,
            "channel": self.channel,
        }
        (row,) = self.db.fetch(self.sql.promote_due, params, what="promote_due", repeatable=True)
        return int(row[0])

    # --- inspection ------------------------------------------------------------------------

    def rates(self, window: timedelta) -> Mapping[str, QueueRates] | None:
        """Counted in one-second buckets of the database's clock, kept for `RATE_HISTORY`."""
        super().rates(window)  # the argument check
        seconds = min(-(-duration_ms(window) // 1000), RATE_HISTORY_S)
        found = self.db.fetch(self.sql.rates, {"seconds": seconds}, what="rates", repeatable=True)
        covered = min(window, RATE_HISTORY)
        return {
            queue: QueueRates(queue=queue, window=covered, entered=entered, finished=finished)
            for queue, entered, finished in sorted(found)
            if entered or finished
        }

    # --- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Close the pool and the LISTEN connection; waiters return at once."""
        with self._listener_lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        self.db.close()


#: What libpq says when a connection will never work as configured.
_HOPELESS = (
    "password authentication failed",
    "authentication failed",
    "no password supplied",
    "does not exist",  # the database or the role
    "no pg_hba.conf entry",
    "certificate verify failed",
    "server does not support SSL",
)
