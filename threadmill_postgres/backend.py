"""`PostgresBackend`: the storage interface on PostgreSQL, one statement per state change.

Each method runs the statement of the same name in `statements` (a batch of
many tasks is one statement and one commit), reads its rows through `rows`,
and lets no driver exception through: `connection.Database` is the one
boundary where they become `PostgresBackendError` / `PostgresUnavailable`
(the core's `BackendUnavailable`, which workers ride out with a backoff).

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
A `claim` is repeated through its receipt (see `statements.CLAIM_BURN`):
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
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import attrs
import psycopg

from threadmill_core import codec
from threadmill_core.backend import NOTHING_DEFERRED, RATE_HISTORY, Backend
from threadmill_core.checks import (
    check_decision,
    check_delay,
    check_limit,
    check_offset,
    check_purgeable,
    queue_names,
    ttl_ms,
)
from threadmill_core.clock import duration_ms, from_ms
from threadmill_core.errors import InvalidOption, PayloadError
from threadmill_core.models import (
    Decision,
    Lease,
    QueueCounts,
    QueueRates,
    TaskResult,
    TaskResultStatus,
)
from threadmill_core.urls import redact
from threadmill_postgres import rows, schema
from threadmill_postgres.connection import (
    REPEATS,
    Connection,
    Database,
    Failure,
    Rows,
)
from threadmill_postgres.errors import NamespaceNotFound, PostgresBackendError, PostgresUnavailable
from threadmill_postgres.listener import Listener
from threadmill_postgres.live_workers import PostgresLiveWorkers
from threadmill_postgres.options import PostgresOptions, place, split_url
from threadmill_postgres.pauses import PostgresPauses
from threadmill_postgres.pool_log import first_line
from threadmill_postgres.producing import Enqueuer
from threadmill_postgres.statements import Statements
from threadmill_postgres.transactional import PostgresTransactional

log = logging.getLogger("threadmill_postgres")

READY = TaskResultStatus.READY
DEFERRED = TaskResultStatus.DEFERRED
RUNNING = TaskResultStatus.RUNNING
SUCCESSFUL = TaskResultStatus.SUCCESSFUL
FAILED = TaskResultStatus.FAILED
CANCELLED = TaskResultStatus.CANCELLED

#: The states each kind of decision leaves a task in while its token stays:
#: a decision on a task in one of them is a repeat, answered from the store.
REPEAT_STATES = {True: frozenset({SUCCESSFUL, FAILED}), False: frozenset({READY, DEFERRED})}

#: Seconds of telemetry kept.
RATE_SECONDS = duration_ms(RATE_HISTORY) // 1000

#: How many expired leases a reaper pass may give back beyond its `limit` of
#: claims in one statement; a pass that meets more goes on in another.
GIVE_BACK_SCAN = 256


class PostgresBackend(PostgresPauses, PostgresLiveWorkers, PostgresTransactional, Backend):
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
        self.sql = Statements(self.namespace)
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

    # --- working ---------------------------------------------------------------------------

    def claim(
        self, queues: Sequence[str], *, worker: str, lease_ttl: timedelta, limit: int = 1
    ) -> list[Lease]:
        names = queue_names(queues)
        worker = rows.check_worker(worker)
        held_ms = ttl_ms("lease_ttl", lease_ttl)
        check_limit(limit)
        names = [name for name in names if rows.storable(name)]  # a NUL-named queue holds nothing
        listener = self._listener
        # Wake-ups from now on count for this thread's next wait (see listener.Listener.wait).
        self._marks.mark = None if listener is None else listener.mark()
        if not names:
            return []

        def take(want: int) -> tuple[Rows, bool]:
            got = self._claim_rows(names, worker, held_ms, want)
            return got, len(got) == want

        return self._filled(limit, take)

    def _claim_rows(self, names: list[str], worker: str, ttl_ms: int, limit: int) -> Rows:
        """One claim's rows; after a lost reply, the receipt decides (see the module doc)."""
        request = uuid.uuid4().hex
        params = {
            "queues": names,
            "worker": worker,
            "ttl": ttl_ms,
            "limit": limit,
            "request": request,
            "channel": self.channel,
        }
        for attempt in range(REPEATS + 1):
            try:
                return self.db.attempt(self.sql.claim, params, "claim")
            except Failure as failure:
                if failure.maybe_applied:
                    found = self._claimed_before(request, ttl_ms)
                    if found is not None:
                        return found
                    request = params["request"] = uuid.uuid4().hex
                if attempt == REPEATS:
                    raise self.db.unavailable(failure, "claim") from failure.cause
                log.debug("claim: %s; repeating the call", failure)
                time.sleep(0.05 * 2**attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def _claimed_before(self, request: str, ttl_ms: int) -> Rows | None:
        """What a claim whose reply was lost granted; None if it took nothing (and never will).

        Taking the receipt waits for that claim if it is still in flight. The
        receipt free: the claim took nothing (and now cannot commit). Taken:
        it committed, and the leases it granted that are still held come back
        (None if there are none left, so the caller claims afresh).
        """
        params = {"request": request, "ttl": ttl_ms}
        if self.db.fetch(self.sql.claim_burn, params, what="claim", repeatable=True):
            return None
        found = self.db.fetch(self.sql.claim_found, params, what="claim", repeatable=True)
        log.debug("claim: the first send of a repeated claim had granted %d leases", len(found))
        return found or None

    def _filled(self, limit: int, take: Callable[[int], tuple[Rows, bool]]) -> list[Lease]:
        """Leases from the rows of `take(n)` calls, poison quarantined and not counted.

        `take(n)` claims up to n and says whether more may be left. One call
        unless poison was found (or the call could not look at everything):
        then the rest of `limit` is claimed again, so poison never costs a
        worker its share of tasks.
        """
        leases: list[Lease] = []
        while len(leases) < limit:
            got, more = take(limit - len(leases))
            poison: list[tuple[Sequence[Any], PayloadError]] = []
            for row in got:
                try:
                    leases.append(rows.lease(row))
                except PayloadError as exc:
                    poison.append((row, exc))
            if poison:
                self._quarantine(poison)
            if not more:
                break
        return leases

    def _quarantine(self, poison: Sequence[tuple[Sequence[Any], PayloadError]]) -> None:
        """Finalize undecodable claimed tasks FAILED (fenced by the claim's token)."""
        ids, tokens, payloads, errors, priorities = [], [], [], [], []
        for row, exc in poison:
            task_id, queue = row[rows.LEASE_ID], row[rows.LEASE_QUEUE]
            log.error("quarantining task %s of queue %r as FAILED: %s", task_id, queue, exc)
            made = rows.stand_in(row, exc)
            ids.append(task_id)
            tokens.append(row[rows.LEASE_TOKEN])
            payloads.append(made[0])
            errors.append(made[1])
            priorities.append(made[2])
        params = {"ids": ids, "tokens": tokens, "payloads": payloads, "errors": errors,
                  "priorities": priorities}  # fmt: skip
        self.db.fetch(self.sql.quarantine, params, what="quarantine", repeatable=True)

    def extend(self, lease: Lease, lease_ttl: timedelta) -> Lease | None:
        return self.extend_many([lease], lease_ttl)[0]

    def extend_many(self, leases: Sequence[Lease], lease_ttl: timedelta) -> list[Lease | None]:
        """Every renewal in one statement; answers in the order given."""
        held_ms = ttl_ms("lease_ttl", lease_ttl)
        leases = list(leases)
        answers: list[Lease | None] = [None] * len(leases)
        sent = [(at, lease) for at, lease in enumerate(leases) if _sendable(lease)]
        if not sent:
            return answers
        params = {
            "ids": [lease.task_id for _, lease in sent],
            "tokens": [lease.token for _, lease in sent],
            "ttl": held_ms,
        }
        got = self.db.fetch(self.sql.extend_many, params, what="extend", repeatable=True)
        for (at, lease), (_n, deadline) in zip(sent, got, strict=True):
            if deadline is not None:
                answers[at] = Lease(
                    token=lease.token, deadline=from_ms(deadline), record=lease.record
                )
        return answers

    def mark_started(self, leases: Sequence[Lease]) -> list[bool]:
        """Every mark in one statement, each fenced on its own; answers in the order given."""
        leases = list(leases)
        answers = [False] * len(leases)
        sent = [(at, lease) for at, lease in enumerate(leases) if _sendable(lease)]
        if not sent:
            return answers
        params = {
            "ids": [lease.task_id for _, lease in sent],
            "tokens": [lease.token for _, lease in sent],
        }
        got = self.db.fetch(self.sql.mark_started, params, what="mark_started", repeatable=True)
        for (at, _lease), (_n, marked) in zip(sent, got, strict=True):
            answers[at] = bool(marked)
        return answers

    def complete(self, lease: Lease, record: TaskResult) -> TaskResult | None:
        return self.decide_many([Decision(lease=lease, record=record)])[0]

    def retry(self, lease: Lease, record: TaskResult, delay: timedelta) -> TaskResult | None:
        return self.decide_many([Decision(lease=lease, record=record, retry_delay=delay)])[0]

    def decide_many(self, decisions: Sequence[Decision]) -> list[TaskResult | None]:
        """Every decision in one statement, each fenced on its own; answers in the order given.

        Every decision is checked (`check_decision`) and its errors and value
        encoded before the statement is sent, so a bad one changes nothing.
        Of several decisions on one task in a batch, the first whose token is
        current is applied and the others are answered as if sent after it.
        """
        decisions = list(decisions)
        encoded: list[tuple[str, int, bytes, bytes | None]] = []
        for decision in decisions:
            check_decision(decision)
            errors = rows.encode_errors(tuple(decision.record.errors))
            if decision.retry_delay is None:
                result = rows.encode_result(decision.record)
                encoded.append((decision.record.status.value, 0, errors, result))
            else:
                delay = duration_ms(decision.retry_delay)
                encoded.append(("READY" if delay == 0 else "DEFERRED", delay, errors, None))
        answers: list[TaskResult | None] = [None] * len(decisions)
        sent = [at for at, decision in enumerate(decisions) if _sendable(decision.lease)]
        if not sent:
            return answers
        params = {
            "ids": [decisions[at].lease.task_id for at in sent],
            "tokens": [decisions[at].lease.token for at in sent],
            "targets": [encoded[at][0] for at in sent],
            "delays": [encoded[at][1] for at in sent],
            "errors": [encoded[at][2] for at in sent],
            "results": [encoded[at][3] for at in sent],
            "ttl": self._ttl_ms,
            "prune": self.options.prune_batch,
            "channel": self.channel,
        }
        got = self.db.fetch(self.sql.decide_many, params, what="decide", repeatable=True)
        applied: dict[str, TaskResult] = {}
        for at, row in zip(sent, got, strict=True):
            decision = decisions[at]
            _n, current, was_applied, status, run_after, finished_at, errors, result = row
            if not current or not (was_applied or _sane(run_after, finished_at)):
                continue  # stale, or a corrupt record refused (the reaper quarantines it)
            completing = decision.retry_delay is None
            state: dict[str, Any] = {
                "status": TaskResultStatus(status),
                "run_after": None if run_after is None else from_ms(run_after),
                "finished_at": None if finished_at is None else from_ms(finished_at),
            }
            if was_applied:
                value = decision.record.return_value if state["status"] is SUCCESSFUL else None
                made = attrs.evolve(
                    decision.lease.record,
                    **state,
                    errors=tuple(decision.record.errors),
                    return_value=value,
                )
                applied[decision.lease.task_id] = answers[at] = made
            elif state["status"] in REPEAT_STATES[completing]:
                earlier = applied.get(decision.lease.task_id)
                answers[at] = (
                    earlier
                    if earlier is not None
                    else self._stored(decision.lease, state, errors, result)
                )
        return answers

    def _stored(
        self, lease: Lease, state: dict[str, Any], errors: bytes, result: bytes | None
    ) -> TaskResult:
        """The record a repeated decision answers: the lease's, with the state as stored."""
        try:
            decoded_errors = codec.decode_errors(errors)
            value = None if result is None else codec.decode_value(result)
        except PayloadError as exc:
            raise PayloadError(f"task {lease.task_id!r}: {exc}") from exc
        return attrs.evolve(lease.record, **state, errors=decoded_errors, return_value=value)

    def release(
        self, leases: Sequence[Lease], delay: timedelta = timedelta(0)
    ) -> list[TaskResult | None]:
        """Every release in one statement, each fenced on its own; answers in the order given."""
        leases = list(leases)
        wait_ms = check_delay(delay)
        answers: list[TaskResult | None] = [None] * len(leases)
        sent = [(at, lease) for at, lease in enumerate(leases) if _sendable(lease)]
        if not sent:
            return answers
        params = {
            "ids": [lease.task_id for _, lease in sent],
            "tokens": [lease.token for _, lease in sent],
            "delay": wait_ms,
            "channel": self.channel,
        }
        got = self.db.fetch(self.sql.release, params, what="release", repeatable=True)
        for (at, lease), (
            _n,
            attempts,
            worker_ids,
            started_at,
            last_attempted_at,
            status,
            due,
        ) in zip(sent, got, strict=True):
            if attempts is None:
                continue
            answers[at] = attrs.evolve(
                lease.record,
                status=TaskResultStatus(status),
                run_after=None if due is None else from_ms(due),
                attempts=attempts,
                worker_ids=tuple(worker_ids),
                started_at=None if started_at is None else from_ms(started_at),
                last_attempted_at=None if last_attempted_at is None else from_ms(last_attempted_at),
            )
        return answers

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

    def claim_expired(self, *, limit: int, claim_ttl: timedelta) -> list[Lease]:
        check_limit(limit)
        held_ms = ttl_ms("claim_ttl", claim_ttl)

        def take(want: int) -> tuple[Rows, bool]:
            scan = want + GIVE_BACK_SCAN
            params = {
                "limit": want,
                "scan": scan,
                "ttl": held_ms,
                "request": uuid.uuid4().hex,
                "channel": self.channel,
            }
            got = self.db.fetch(
                self.sql.claim_expired, params, what="claim_expired", repeatable=True
            )
            claimed = [row[1:] for row in got if row[1] is not None]
            # More may be left when the pass stopped at a bound: its scan, or its `want`-th claim.
            return claimed, got[0][0] == scan or len(claimed) == want

        return self._filled(limit, take)

    def expire_leases(self, worker: str) -> int:
        """One statement (`lease_expiry.EXPIRE_LEASES`); repeated after a lost reply (a repeat
        finds nothing left to expire)."""
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

    def get(self, task_id: str) -> TaskResult | None:
        if not rows.storable(task_id):
            return None
        found = self.db.fetch(
            self.sql.get, {"id": task_id, "ttl": self._ttl_ms}, what="get", repeatable=True
        )
        return rows.record(found[0]) if found else None

    def peek(
        self, queue: str, status: TaskResultStatus, *, offset: int = 0, limit: int = 100
    ) -> list[TaskResult]:
        status = TaskResultStatus(status)
        check_limit(limit)
        check_offset(offset)
        if not rows.storable(queue):
            return []
        params = {"queue": queue, "ttl": self._ttl_ms, "offset": offset, "limit": limit}
        found = self.db.fetch(self.sql.peek[status.value], params, what="peek", repeatable=True)
        return [rows.record(row) for row in found]

    def counts(self) -> Mapping[str, QueueCounts]:
        found = self.db.fetch(
            self.sql.counts, {"ttl": self._ttl_ms}, what="counts", repeatable=True
        )
        tallies: dict[str, dict[str, int]] = {}
        for queue, status, count in found:
            tallies.setdefault(queue, {})[status.lower()] = int(count)
        return {queue: QueueCounts(queue=queue, **tallies[queue]) for queue in sorted(tallies)}

    def rates(self, window: timedelta) -> Mapping[str, QueueRates] | None:
        """Counted in one-second buckets of the database's clock, kept for `RATE_HISTORY`."""
        super().rates(window)  # the argument check
        seconds = min(-(-duration_ms(window) // 1000), RATE_SECONDS)
        found = self.db.fetch(self.sql.rates, {"seconds": seconds}, what="rates", repeatable=True)
        covered = min(window, RATE_HISTORY)
        return {
            queue: QueueRates(queue=queue, window=covered, entered=entered, finished=finished)
            for queue, entered, finished in sorted(found)
            if entered or finished
        }

    # --- operator actions ------------------------------------------------------------------

    def requeue(self, task_id: str) -> TaskResult | None:
        if not rows.storable(task_id):
            return None

        def block(conn: Connection) -> TaskResult | None:
            params = {"id": task_id, "ttl": self._ttl_ms, "channel": self.channel}
            found = conn.execute(self.sql.requeue_lock, params, binary=True).fetchall()
            if not found:
                return None
            record = rows.record(found[0])  # poison raises here, before anything changes
            conn.execute(self.sql.requeue, params)
            return attrs.evolve(record, status=READY, finished_at=None, return_value=None)

        return self.db.transaction(block, what="requeue")

    def cancel(self, task_id: str) -> TaskResult | None:
        if not rows.storable(task_id):
            return None

        def block(conn: Connection) -> TaskResult | None:
            params = {"id": task_id}
            found = conn.execute(self.sql.cancel_lock, params, binary=True).fetchall()
            if not found:
                return None
            record = rows.record(found[0])  # poison raises here, before anything changes
            ((finished_at,),) = conn.execute(self.sql.cancel, params).fetchall()
            return attrs.evolve(record, status=CANCELLED, finished_at=from_ms(finished_at))

        return self.db.transaction(block, what="cancel")

    def purge(self, queue: str, status: TaskResultStatus) -> int:
        status = check_purgeable(status)
        if not rows.storable(queue):
            return 0
        statement = self.sql.purge[status.value]
        params = {"queue": queue, "batch": self.options.purge_batch, "ttl": self._ttl_ms}
        purged = 0

        def block(conn: Connection) -> tuple[int, int]:
            ((deleted, live),) = conn.execute(statement, params).fetchall()
            return int(deleted), int(live)

        while True:
            deleted, live = self.db.transaction(block, what="purge")
            purged += live
            if deleted < self.options.purge_batch:
                return purged

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


# --- argument checks (before any statement: a bad argument changes nothing) -------------


def _sendable(lease: Lease) -> bool:
    """Whether a lease could be current: a token or id with NUL was never issued here."""
    return rows.storable(lease.task_id) and rows.storable(lease.token)


def _sane(*stamps: int | None) -> bool:
    """Whether every stored time is one a datetime can hold (a corrupt one is not)."""
    return all(stamp is None or rows.MIN_MS <= stamp <= rows.MAX_MS for stamp in stamps)
