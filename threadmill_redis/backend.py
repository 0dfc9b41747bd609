"""`RedisBackend`: the storage interface on Redis, one atomic Lua script per state change.

Each method runs the script of the same name in ``lua/`` (batches of many
tasks cost one round trip), turns its status codes into core results in
`replies`, and lets no driver exception through: `boundary.call` is the
one boundary where they become `RedisBackendError` / `RedisUnavailable`
(the core's `BackendUnavailable`, which workers ride out with a backoff).
Arguments are checked with the core's shared checks before anything is
sent (`threadmill_core.checks`), so a refused call changes nothing.

Lost replies. Calls whose repeat is answered as the first time are sent
again when the connection drops before the reply arrives: `complete`,
`retry`, `decide_many` (the scripts recognise a repeated decision by its
token, see ``lib/complete_task.lua``), `claim` (each call leaves a receipt,
and a repeat is answered with the same leases, see ``claim.lua``),
`extend`, `mark_started` (marking again is answered as the first time),
`enqueue` (idempotent on id), `promote_due` (a repeat promotes only what is
due) and the reads. The others (`claim_expired`, `requeue`,
`cancel`, `purge`) raise `RedisUnavailable` instead, since a repeat would
act again; a reaper claim whose reply was lost lapses after its claim TTL
and is taken up again. Clients the backend builds itself do not retry
inside redis-py, so this policy is the only one.

Connections. Script calls go on a connection of the calling thread's own
(`threadmill_redis.connections`), one EVALSHA per call (`scripts.evalsha`);
the calls of a long `enqueue` go one after another on it, each sent while
the server runs the one before (`scripts.evalsha_each`). The idle wait
(`wait_for_tasks`) blocks on that connection too; other commands go through
the client's connection pool.

Redis Cluster. A `redis.RedisCluster` client works as well as a
`redis.Redis`: every key of the namespace shares one hash tag, so every
script runs on the namespace's shard, and `now()` reads that shard's clock.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import redis

from threadmill_core import codec
from threadmill_core.backend import (
    NOTHING_DEFERRED,
    RATE_HISTORY,
    Backend,
    TaskCall,
)
from threadmill_core.checks import (
    check_calls,
    check_decision,
    check_delay,
    check_limit,
    check_offset,
    check_purgeable,
    check_records,
    check_window,
    queue_names,
    ttl_ms,
)
from threadmill_core.clock import duration_ms, from_ms
from threadmill_core.errors import InvalidOption, PayloadError, TaskQuarantined
from threadmill_core.ids import new_task_id
from threadmill_core.models import (
    Decision,
    Lease,
    QueueCounts,
    QueueRates,
    TaskError,
    TaskResult,
    TaskResultStatus,
)
from threadmill_redis import arguments, clients, connections, scripts
from threadmill_redis.boundary import call
from threadmill_redis.clients import Client
from threadmill_redis.errors import RedisBackendError, RedisUnavailable
from threadmill_redis.keys import STARTS, STORE, TELEMETRY, Keys
from threadmill_redis.live_workers import RedisLiveWorkers
from threadmill_redis.options import RedisOptions, split_url
from threadmill_redis.pauses import RedisPauses
from threadmill_redis.replies import (
    Row,
    answer,
    claimed_rows,
    completed,
    decided,
    encode_worker,
    enqueued,
    extended,
    marked,
    parse_state,
)

log = logging.getLogger("threadmill_redis")

SCHEMES = tuple(clients.SCHEMES)


#: Hex digits of a task id's random tail (`new_task_id`) that a claim call
#: sends as the nonce of its tokens: 48 random bits, so a token repeated
#: after a rollback of the data (which repeats the counter's numbers) needs
#: two calls to draw the same 48 bits.
NONCE_LENGTH = 12

#: The names of the namespace-wide keys a script header may declare.
SCHEMA = frozenset(STORE + TELEMETRY + STARTS)


class RedisBackend(RedisPauses, RedisLiveWorkers, Backend):
    """Tasks stored in Redis under one namespace (see `threadmill_redis.keys`).

    `client` (a `redis.Redis` or `redis.RedisCluster`) must not decode
    responses (payloads are bytes). Options are those of `RedisOptions`;
    `from_url` reads them from a URL as well.
    """

    def __init__(self, client: Client, **options: object) -> None:
        if not isinstance(client, redis.Redis | redis.RedisCluster):
            raise InvalidOption(
                f"client must be a redis.Redis or redis.RedisCluster, got {client!r}"
            )
        if client.get_encoder().decode_responses:
            raise InvalidOption("the Redis client must not decode responses (decode_responses)")
        self.options = RedisOptions.from_mapping(options)
        self.client = client
        self.keys = Keys(self.options.namespace)
        self._static_keys: dict[str, list[str | None]] = {}
        self._ttl_ms = duration_ms(self.options.result_ttl)
        self._owns_client = False
        #: Sends one command: on a connection of this thread's (see `connections`), or
        #: through a cluster client, which picks the node.
        self._connections = (
            connections.ThreadConnections(client) if isinstance(client, redis.Redis) else None
        )
        self._execute = (
            self._connections.execute if self._connections is not None else client.execute_command
        )
        #: Where the client connects, without credentials, for messages.
        self.where = clients.location(client)
        clients.check_server(client, self.keys, self.where)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisBackend:
        """Build from a ``redis://``, ``rediss://``, ``unix://``, ``redis+cluster://``,
        ``redis+sentinel://`` or ``rediss+sentinel://`` URL.

        Our options come from the query string or keywords; other query
        parameters go to redis-py (``ssl_ca_certs``, ``socket_timeout``,
        ...); credentials go in the URL (``redis://user:password@host``). A
        ``client=`` keyword (a redis.Redis) is used instead of connecting to
        the URL's host. Refused credentials are an `InvalidOption` here, not
        an outage; a cluster none of whose nodes answers is `RedisUnavailable`.
        """
        client = options.pop("client", None)
        ours, driver_query = split_url(url, options, SCHEMES)
        if client is not None:
            return cls(client, **ours)
        # No retries inside redis-py: this backend decides what may be repeated.
        client = clients.client_from_url(url, driver_query)
        try:
            backend = cls(client, **ours)
        except BaseException:
            client.close()
            raise
        backend._owns_client = True
        return backend

    def __repr__(self) -> str:
        # `where`, not the client's repr: the address without its credentials.
        return f"RedisBackend({self.where!r}, namespace={self.options.namespace!r})"

    # --- the driver boundary -----------------------------------------------------------

    def _run(
        self,
        name: str,
        args: Sequence[Any],
        *,
        repeatable: bool,
        extra_keys: Sequence[str] = (),
        **named_keys: str,
    ) -> Any:
        """Run script `name` once with `args`; its keys by name (see `_script_keys`)."""
        script = scripts.load(name)
        keys = self._script_keys(script, named_keys, extra_keys)
        return call(
            lambda: scripts.evalsha(self._execute, script, keys, args),
            repeatable=repeatable,
            what=name,
            where=self.where,
        )

    def _script_keys(
        self, script: scripts.Script, named: Mapping[str, str], extra: Sequence[str]
    ) -> list[str]:
        """The KEYS of a `script` call, in the order its header names them, then `extra`.

        The namespace's own keys are filled in by name; `named` gives the
        others (a claim's receipt, a queue's notify list), and may override.
        """
        keys: list[str | None] | None = self._static_keys.get(script.name)
        if keys is None:  # worked out once per script
            keys = self._static_keys[script.name] = [
                self.keys.store(name) if name in SCHEMA else None for name in script.key_names
            ]
        if named:
            keys = [named.get(name, key) for name, key in zip(script.key_names, keys, strict=True)]
        if None in keys:
            missing = [name for name, key in zip(script.key_names, keys, strict=True) if not key]
            raise ValueError(f"{script.name}.lua needs the keys {missing}")
        return [*keys, *extra]  # type: ignore[list-item]  # no None left, as checked

    # --- clock -------------------------------------------------------------------------

    def now(self) -> datetime:
        here = clients.on_key_node(self.client, self.keys.store("state"))
        seconds, micros = call(
            lambda: self.client.time(**here),
            repeatable=True,
            what="the clock read (TIME)",
            where=self.where,
        )
        return from_ms(int(seconds) * 1000 + int(micros) // 1000)

    # --- producing ---------------------------------------------------------------------

    def enqueue(self, records: Sequence[TaskResult]) -> list[TaskResult]:
        """Store `records` as `_store` does (see there)."""
        records = list(records)
        check_records(records)
        return self._store([(r, [(r.id, r.args, r.kwargs)]) for r in records])

    def enqueue_calls(self, template: TaskResult, calls: Sequence[TaskCall]) -> list[TaskResult]:
        """Store the calls as `_store` does, without a record per call (see `Backend`)."""
        calls = list(calls)
        check_calls(template, calls)
        return self._store([(template, calls)])

    def _store(self, groups: Sequence[arguments.Group]) -> list[TaskResult]:
        """Store checked tasks with ``enqueue.lua``, in calls of at most ``enqueue_batch`` tasks.

        One call is one EVALSHA. The calls of a longer batch go one after
        another, each encoded while the server stores the one before and
        answered while it stores the next (`scripts.evalsha_each`); each is
        atomic on its own. A repeat after a dropped connection sends them all
        again, which stores nothing twice (idempotent on id). A batch that
        fails after some calls stored their tasks raises `PartlyEnqueued`
        naming the ids stored and not stored; one that stored nothing raises
        the error itself.
        """
        chunks = arguments.chunks(groups, self.options.enqueue_batch)
        if not chunks:
            return []
        if len(chunks) == 1:
            [chunk] = chunks
            script, keys, args = self._enqueue_call(chunk)
            now, *rows = call(
                lambda: scripts.evalsha(self._execute, script, keys, args),
                repeatable=True,
                what="enqueue",
                where=self.where,
            )
            return enqueued(rows, chunk, now)

        stored: list[list[TaskResult] | None] = [None for _ in chunks]

        def answer(index: int, reply: Any) -> None:
            now, *rows = reply
            stored[index] = enqueued(rows, chunks[index], now)

        def store_all() -> list[TaskResult]:
            calls = (self._enqueue_call(chunk) for chunk in chunks)
            scripts.evalsha_each(self._connections, self._execute, calls, answer)
            return [record for chunk in stored for record in chunk or ()]

        try:
            return call(store_all, repeatable=True, what="enqueue", where=self.where)
        except RedisBackendError as exc:
            if not any(chunk is not None for chunk in stored):
                raise  # nothing stored: the error as it is
            raise arguments.partly_enqueued(chunks, stored, exc) from exc

    def _enqueue_call(self, groups: Sequence[arguments.Group]) -> scripts.Call:
        """The ``enqueue.lua`` call of `groups`: its keys (a notify list per queue) and ARGV."""
        script = scripts.load("enqueue")
        queues = list(dict.fromkeys(base.queue for base, _ in groups))
        first = len(script.key_names) + 1  # the KEYS index of the first notify list
        notify_index = {queue: first + n for n, queue in enumerate(queues)}
        keys = self._script_keys(script, {}, [self.keys.notify(queue) for queue in queues])
        args = [self.options.notify_cap, *arguments.enqueue_runs(groups, notify_index)]
        return script, keys, args

    # --- working -----------------------------------------------------------------------

    def claim(
        self, queues: Sequence[str], *, worker: str, lease_ttl: timedelta, limit: int = 1
    ) -> list[Lease]:
        names = queue_names(queues)
        head = [encode_worker(worker), ttl_ms("lease_ttl", lease_ttl)]
        check_limit(limit)
        if not names:
            return []

        def take(want: int) -> list[Row]:
            # A receipt per call (not per repeat): a repeat after a lost reply
            # is answered with the leases the first send granted. Its name is
            # made as task ids are, from random bytes read ahead, so a woken
            # worker's claim makes no system call for it (uuid4 would).
            # Its random tail is also the nonce of the call's tokens (see claim.lua).
            request = new_task_id()
            receipt = self.keys.claim_receipt(request)
            args = [*head, want, request[-NONCE_LENGTH:], *names]
            return claimed_rows(self._run("claim", args, repeatable=True, receipt=receipt))

        return self._filled(limit, take)

    def _filled(self, limit: int, take: Callable[[int], list[Row]]) -> list[Lease]:
        """Leases from claim rows of `take(n)` calls, poison quarantined and not counted.

        One call unless a claim found poison: then the rest of `limit` is
        claimed again, so poison never costs a worker its share of tasks.
        """
        leases: list[Lease] = []
        while len(leases) < limit:
            want = limit - len(leases)
            rows = take(want)
            poison = []
            for row in rows:
                try:
                    leases.append(row.lease())
                except PayloadError as exc:
                    poison.append((row, exc))
            if not poison or len(rows) < want:
                if poison:
                    self._quarantine(poison)
                break
            self._quarantine(poison)
        return leases

    def _quarantine(self, poison: Sequence[tuple[Row, PayloadError]]) -> None:
        """Finalize undecodable claimed tasks FAILED (fenced by the claim's token).

        The payload is replaced by a readable stand-in with an empty
        ``task_path``, so the task can still be read, counted and purged.
        """
        args: list[Any] = [self._ttl_ms, self.options.prune_batch]
        for row, exc in poison:
            log.error("quarantining task %s as FAILED: %s", row.id, exc)
            state = parse_state(row.state or b"")
            try:
                errors = codec.decode_errors(row.errors) if row.errors else ()
            except PayloadError:
                errors = ()
            message = f"the stored payload could not be decoded, so the task cannot run: {exc}"
            error = TaskError.from_exception(TaskQuarantined(message))
            stand_in = TaskResult(
                id=row.id, task_path="", queue=state.queue, priority=state.priority
            )
            args += [row.id, state.token or "", codec.encode_record(stand_in)]
            args.append(codec.encode_errors((*errors, error)))
        self._run("quarantine", args, repeatable=True)

    def extend(self, lease: Lease, lease_ttl: timedelta) -> Lease | None:
        ttl = ttl_ms("lease_ttl", lease_ttl)
        reply = self._run("extend", [lease.task_id, lease.token, ttl], repeatable=True)
        return extended(reply, lease)

    def extend_many(self, leases: Sequence[Lease], lease_ttl: timedelta) -> list[Lease | None]:
        ttl = ttl_ms("lease_ttl", lease_ttl)
        if not leases:
            return []
        args: list[Any] = [ttl]
        for lease in leases:
            args += [lease.task_id, lease.token]
        reply = self._run("extend_many", args, repeatable=True)
        return [extended(item, lease) for item, lease in zip(reply, leases, strict=True)]

    def mark_started(self, leases: Sequence[Lease]) -> list[bool]:
        """Marks the batch with one ``mark_started.lua``; repeated after a lost reply
        (marking again is answered as the first time)."""
        if not leases:
            return []
        args: list[Any] = []
        for lease in leases:
            args += [lease.task_id, lease.token]
        reply = self._run("mark_started", args, repeatable=True)
        return [marked(code) for code in reply]

    def complete(self, lease: Lease, record: TaskResult) -> TaskResult | None:
        check_decision(Decision(lease=lease, record=record))
        args = [lease.task_id, lease.token, *arguments.outcome(record)]
        reply = self._run(
            "complete", [*args, self._ttl_ms, self.options.prune_batch], repeatable=True
        )
        return decided(reply, Decision(lease=lease, record=record))

    def retry(self, lease: Lease, record: TaskResult, delay: timedelta) -> TaskResult | None:
        check_decision(Decision(lease=lease, record=record, retry_delay=delay))
        args = [
            lease.task_id,
            lease.token,
            duration_ms(delay),
            codec.encode_errors(record.errors),
        ]
        reply = self._run(
            "retry",
            [*args, self.options.notify_cap],
            repeatable=True,
            notify=self.keys.notify(lease.record.queue),
        )
        return decided(reply, Decision(lease=lease, record=record, retry_delay=delay))

    def decide_many(self, decisions: Sequence[Decision]) -> list[TaskResult | None]:
        args: list[Any] = []
        queues: list[str] = []
        first = len(scripts.load("decide_many").key_names) + 1
        for d in decisions:  # every decision is checked before any is sent
            check_decision(d)
            if d.retry_delay is None:
                args += [
                    "complete",
                    d.lease.task_id,
                    d.lease.token,
                    *arguments.outcome(d.record),
                    0,
                ]
                continue
            if d.lease.record.queue not in queues:
                queues.append(d.lease.record.queue)
            args += ["retry", d.lease.task_id, d.lease.token, duration_ms(d.retry_delay)]
            args += [
                codec.encode_errors(d.record.errors),
                "",
                first + queues.index(d.lease.record.queue),
            ]
        if not decisions:
            return []
        time, *rows = self._decide(args, [self.keys.notify(queue) for queue in queues])
        finished_at = from_ms(int(time))  # of every completion applied (a bare OK row)
        return [
            completed(d, finished_at) if isinstance(row, int) else decided(row, d)
            for row, d in zip(rows, decisions, strict=True)
        ]

    def _decide(self, decisions: list[Any], notify: list[str]) -> Any:
        head = [self._ttl_ms, self.options.prune_batch, self.options.notify_cap]
        return self._run("decide_many", head + decisions, repeatable=True, extra_keys=notify)

    def release(
        self, leases: Sequence[Lease], delay: timedelta = timedelta(0)
    ) -> list[TaskResult | None]:
        wait_ms = check_delay(delay)
        if not leases:
            return []
        args: list[Any] = [wait_ms]
        for lease in leases:
            args += [lease.task_id, lease.token]
        # Repeatable: the first send clears the tokens, so a repeat is refused, changing nothing.
        reply = self._run("release", args, repeatable=True)
        released = [answer(row, lease.record) for row, lease in zip(reply, leases, strict=True)]
        self._notify(list(dict.fromkeys(r.queue for r in released if r is not None)))
        return released

    def wait_for_tasks(self, queues: Sequence[str], timeout: timedelta) -> bool:
        """Block on the queues' notify lists (BLPOP) until a task may be ready, or `timeout`.

        The BLPOP goes on the calling thread's connection (see `connections`),
        as its claim after a wake-up will: a woken worker is not slowed by
        the pool's and the client's bookkeeping between the wake-up and the
        claim. It blocks for less than the client's socket timeout, repeating
        if need be, so a quiet wait is never mistaken for a dead connection:
        an idle worker costs one command per `timeout` (or per socket
        timeout, if shorter). True when a wake-up token was taken, False when
        `timeout` passed without one.
        """
        keys = [self.keys.notify(queue) for queue in queue_names(queues)]
        if not keys:  # nothing could wake us; returning at once would let a caller spin
            time.sleep(max(timeout.total_seconds(), 0.0))
            return False
        deadline = time.monotonic() + timeout.total_seconds()
        socket_timeout = clients.socket_timeout(self.client)
        longest = max(socket_timeout - 1.0, 0.1) if socket_timeout else None
        while True:
            remaining = round(deadline - time.monotonic(), 3)
            if remaining <= 0:  # BLPOP 0 would block forever
                return False
            block = min(remaining, longest) if longest else remaining
            woken = call(
                functools.partial(self._execute, "BLPOP", *keys, block),
                repeatable=True,
                what="wait",
                where=self.where,
            )
            if woken is not None:
                return True

    def _notify(self, queues: Sequence[str]) -> None:
        """Wake workers of `queues`, for scripts that learn the queues only when they run.

        A hint, not state: a wake-up lost between the script and this call
        delays a task until an idle worker claims anyway (after one polling
        interval in-process, up to 30 under a supervisor), nothing more.
        """
        if not queues:
            return

        def push() -> None:
            with self.client.pipeline(transaction=False) as pipe:
                for queue in queues:
                    pipe.lpush(self.keys.notify(queue), 1)
                    pipe.ltrim(self.keys.notify(queue), 0, self.options.notify_cap - 1)
                pipe.execute()

        try:
            call(push, repeatable=True, what="notify", where=self.where)
        except RedisUnavailable as exc:  # out of memory, say: the change itself was made
            log.debug("could not wake the workers of %s: %s", ", ".join(queues), exc)

    # --- maintenance -------------------------------------------------------------------

    def claim_expired(self, *, limit: int, claim_ttl: timedelta) -> list[Lease]:
        """One ``claim_expired.lua`` (more only to replace quarantined poison); then the
        queues of the tasks it gave back are woken, and the give-backs logged."""
        ttl = ttl_ms("claim_ttl", claim_ttl)
        given_back: list[str] = []

        def take(want: int) -> list[Row]:
            nonce = new_task_id()[-NONCE_LENGTH:]
            reply: list[Any] = self._run("claim_expired", [want, ttl, nonce], repeatable=False)
            given_back.extend(queue.decode() for queue in reply[0])
            return [Row.parse(row) for row in reply[1:]]

        leases = self._filled(check_limit(limit), take)
        if given_back:
            log.info(
                "gave back %d expired task(s) whose start was never recorded, uncharged",
                len(given_back),
            )
            self._notify(list(dict.fromkeys(given_back)))
        return leases

    def expire_leases(self, worker: str) -> int:
        """One ``expire_leases.lua``, which reads every live lease (there is no index by worker:
        a pass made once per dead worker process, not on any claim or decision); repeated
        after a lost reply (a repeat finds nothing left to expire)."""
        return int(self._run("expire_leases", [encode_worker(worker)], repeatable=True))

    def promote_due(self, *, limit: int) -> int:
        args = [check_limit(limit), self._ttl_ms, self.options.prune_batch]
        count, *queues = self._run("promote_due", args, repeatable=True)
        self._notify([queue.decode() for queue in queues])
        return int(count)

    def next_due(self) -> timedelta | None:
        """Read from the due index and the server's ``TIME`` in one round trip (``next_due.lua``).

        An idle namespace (nothing deferred) costs two commands: the EVALSHA
        and one ZRANGE; the clock is read only when something is deferred.
        """
        ms = self._run("next_due", [], repeatable=True)
        return NOTHING_DEFERRED if ms is None else timedelta(milliseconds=int(ms))

    # --- inspection --------------------------------------------------------------------

    def get(self, task_id: str) -> TaskResult | None:
        reply = self._run("get", [task_id, self._ttl_ms], repeatable=True)
        return None if reply is None else Row.parse(reply).record()

    def peek(
        self, queue: str, status: TaskResultStatus, *, offset: int = 0, limit: int = 100
    ) -> list[TaskResult]:
        args = [
            queue,
            TaskResultStatus(status).value,
            check_offset(offset),
            check_limit(limit),
            self._ttl_ms,
        ]
        reply = self._run("peek", args, repeatable=True)
        return [Row.parse(row).record() for row in reply]

    def counts(self) -> Mapping[str, QueueCounts]:
        flat = self._run("counts", [self._ttl_ms], repeatable=True)
        counts = {}
        for at in range(0, len(flat), 7):
            queue = flat[at].decode()
            ready, deferred, running, successful, failed, cancelled = flat[at + 1 : at + 7]
            counts[queue] = QueueCounts(
                queue=queue,
                ready=ready,
                deferred=deferred,
                running=running,
                successful=successful,
                failed=failed,
                cancelled=cancelled,
            )
        return dict(sorted(counts.items()))

    def rates(self, window: timedelta) -> Mapping[str, QueueRates] | None:
        """Counted in one-second buckets of the server clock over the last hour (`RATE_HISTORY`).

        The scripts that store, requeue and finish tasks count them as they
        change them (see `threadmill_redis.keys`); this reads the buckets of
        the window, and only those, in one round trip.
        """
        check_window(window)
        flat = self._run("rates", [duration_ms(window)], repeatable=True)
        covered = min(window, RATE_HISTORY)
        rates = {}
        for at in range(0, len(flat), 3):
            queue, entered, finished = flat[at].decode(), int(flat[at + 1]), int(flat[at + 2])
            if entered or finished:
                rates[queue] = QueueRates(
                    queue=queue, window=covered, entered=entered, finished=finished
                )
        return dict(sorted(rates.items()))

    # --- operator actions --------------------------------------------------------------

    def requeue(self, task_id: str) -> TaskResult | None:
        record = answer(self._run("requeue", [task_id, self._ttl_ms], repeatable=False))
        if record is not None:
            self._notify([record.queue])
        return record

    def cancel(self, task_id: str) -> TaskResult | None:
        return answer(self._run("cancel", [task_id], repeatable=False))

    def purge(self, queue: str, status: TaskResultStatus) -> int:
        status = check_purgeable(status)
        batch, purged = self.options.purge_batch, 0
        while True:
            args = [queue, status.value, batch, self._ttl_ms]
            deleted, live = self._run("purge", args, repeatable=False)
            purged += int(live)
            if deleted < batch:
                return purged

    # --- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        """Close the client if this backend built it (`from_url`); a given client stays open.

        Its pool is disconnected too: redis-py 5.0.0's ``Redis.close`` leaves
        the connections of a pool made by ``from_url`` open (5.0.1 closes them).
        """
        if self._connections is not None:
            self._connections.close()
        if self._owns_client:
            self.client.close()
            if isinstance(self.client, redis.Redis):
                self.client.connection_pool.disconnect()
