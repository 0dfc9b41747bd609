"""`RedisBackend`: the storage interface on Redis, one atomic Lua script per state change.

Each method runs the script of the same name in ``lua/`` (batches of many
tasks cost one round trip), turns its status codes into core results in
`replies`, and lets no driver exception through: `connection.call` is the
one boundary where they become `RedisBackendError` / `RedisUnavailable`
(the core's `BackendUnavailable`, which workers ride out with a backoff).

Lost replies. Calls whose repeat is answered as the first time are sent
again when the connection drops before the reply arrives: `complete`,
`retry`, `decide_many` (the scripts recognise a repeated decision by its
token, see ``lib/complete_task.lua``), `claim` (each call leaves a receipt,
and a repeat is answered with the same leases, see ``claim.lua``),
`extend`, `enqueue` (idempotent on id), `promote_due` (a repeat promotes
only what is due) and the reads. The others (`claim_expired`, `requeue`,
`cancel`, `purge`) raise `RedisUnavailable` instead, since a repeat would
act again; a reaper claim whose reply was lost lapses after its claim TTL
and is taken up again. Clients the backend builds itself do not retry
inside redis-py, so this policy is the only one.

Connections. With a plain `redis.Redis` (the usual case, and what
``from_url`` builds), scripts run on connections made by the client's pool
but lent by the backend (`connection.HeldConnections`), which skips the
pool's per-call bookkeeping; each is checked before it is lent, as the pool
checks its own. Backends on one client share them (as many as scripts ran
at once), they count toward the pool's ``max_connections``, a retry policy
configured on a given client does not apply to them (the policy above
does), and they close with a client the backend built, or with the pool.
Blocking waits (`wait_for_tasks`) and a cluster's calls go through the pool.

Redis Cluster. A `redis.RedisCluster` client works as well as a
`redis.Redis`: every key of the namespace shares one hash tag, so every
script runs on the namespace's shard, and `now()` reads that shard's clock.
"""

from __future__ import annotations

import functools
import itertools
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import redis

from threadmill_core import codec
from threadmill_core.backend import (
    NOTHING_DEFERRED,
    RATE_HISTORY,
    Backend,
    CheckedRecords,
    check_decision,
)
from threadmill_core.clock import duration_ms, from_ms, to_ms
from threadmill_core.errors import InvalidOption, PayloadError, TaskQuarantined
from threadmill_core.models import (
    Decision,
    Lease,
    QueueCounts,
    QueueRates,
    TaskError,
    TaskResult,
    TaskResultStatus,
)
from threadmill_redis import arguments, connection, scripts
from threadmill_redis.connection import Client
from threadmill_redis.keys import STORE, TELEMETRY, Keys
from threadmill_redis.options import RedisOptions, split_query
from threadmill_redis.replies import (
    Row,
    answer,
    decided,
    encode_worker,
    extended,
    parse_state,
)

log = logging.getLogger("threadmill_redis")

SCHEMES = tuple(connection.SCHEMES)


#: The names of the namespace-wide keys a script header may declare.
SCHEMA = frozenset(STORE + TELEMETRY)


class RedisBackend(Backend):
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
        #: enqueue_one.lua's keys by queue (its notify list is the queue's).
        self._enqueue_one_keys: dict[str, list[str]] = {}
        self._ttl_ms = duration_ms(self.options.result_ttl)
        self._owns_client = False
        # The scripts' connections, past the pool's bookkeeping (None: through the pool).
        self._held = connection.HeldConnections.for_client(client)
        self._check_server()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisBackend:
        """Build from a ``redis://``, ``rediss://``, ``unix://`` or ``redis+cluster://`` URL.

        Our options come from the query string or keywords; other query
        parameters go to redis-py (``ssl_ca_certs``, ``socket_timeout``,
        ...); credentials go in the URL (``redis://user:password@host``). A
        ``client=`` keyword (a redis.Redis) is used instead of connecting to
        the URL's host. Refused credentials are an `InvalidOption` here, not
        an outage; a cluster none of whose nodes answers is `RedisUnavailable`.
        """
        parts = urlsplit(url)
        if parts.scheme not in SCHEMES:
            raise InvalidOption(f"not a Redis URL (schemes: {', '.join(SCHEMES)}): {url!r}")
        client = options.pop("client", None)
        ours, driver_query = split_query(parts.query, options)
        if client is not None:
            return cls(client, **ours)
        # No retries inside redis-py: this backend decides what may be repeated.
        client = connection.client_from_url(url, driver_query)
        try:
            backend = cls(client, **ours)
        except BaseException:
            client.close()
            raise
        backend._owns_client = True
        return backend

    def __repr__(self) -> str:
        return f"RedisBackend(namespace={self.options.namespace!r}, client={self.client!r})"

    # --- the driver boundary -----------------------------------------------------------

    def _run(
        self,
        name: str,
        args: Sequence[Any],
        *,
        repeatable: bool,
        keys_repeat: bool = True,
        extra_keys: Sequence[str] = (),
        **named_keys: str,
    ) -> Any:
        script = scripts.load(name)
        keys = self._script_keys(script, named_keys, extra_keys)
        return self._evalsha(script, keys, args, repeatable=repeatable, keys_repeat=keys_repeat)

    def _evalsha(
        self,
        script: scripts.Script,
        keys: Sequence[str],
        args: Sequence[Any],
        *,
        repeatable: bool,
        keys_repeat: bool = True,
    ) -> Any:
        """Run `script` through `connection.call`, on a held connection where there are any.

        `keys_repeat`: later calls will name the same keys (see `scripts.evalsha_held`).
        """
        held = self._held
        if held is None:
            return connection.call(
                lambda: scripts.evalsha(self.client, script, keys, args),
                repeatable=repeatable,
                what=script.name,
            )
        return connection.call(
            lambda: scripts.evalsha_held(held, script, keys, args, keys_repeat=keys_repeat),
            repeatable=repeatable,
            what=script.name,
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

    def _check_server(self) -> None:
        """Raise `InvalidOption` for what cannot work; warn unless ``noeviction``.

        Refused credentials, a server certificate that does not verify and a
        Redis user that may not use this namespace's keys will not go away by
        waiting, so they fail here. A server that cannot be reached now is
        not an error: workers start during an outage too, and ride it out.
        """
        try:
            # One read of a namespace key settles credentials, certificate and key permissions.
            self.client.exists(self.keys.store("state"))
        except redis.AuthenticationError as exc:
            raise InvalidOption(f"Redis refused the credentials: {exc}") from exc
        except redis.exceptions.NoPermissionError as exc:
            raise InvalidOption(
                f"the Redis user may not use the keys of namespace {self.keys.namespace!r} "
                f"({self.keys.prefix}*): {exc}"
            ) from exc
        except (redis.RedisError, redis.exceptions.RedisClusterException) as exc:
            if connection.certificate_refused(exc):
                raise InvalidOption(f"Redis's TLS certificate does not verify: {exc}") from exc
            log.debug("Redis is not reachable now (%s); calls will wait for it", exc)
            return
        self._warn_about_eviction()

    def _warn_about_eviction(self) -> None:
        here = connection.on_key_node(self.client, self.keys.store("state"))
        try:
            reply = self.client.config_get("maxmemory-policy", **here)
        except (redis.RedisError, redis.exceptions.RedisClusterException) as exc:
            # CONFIG may be disabled (managed Redis, an ACL user without it, fakeredis).
            log.debug("could not read maxmemory-policy: %s", exc)
            return
        policy = reply.get("maxmemory-policy")
        if policy not in (None, "noeviction", b"noeviction"):
            log.warning(
                "Redis maxmemory-policy is %r, not 'noeviction': when memory runs out Redis "
                "may evict threadmill's keys (task records, leases, whole queues), losing "
                "tasks silently; set maxmemory-policy to noeviction so writes fail loudly instead",
                policy.decode() if isinstance(policy, bytes) else policy,
            )

    # --- clock -------------------------------------------------------------------------

    def now(self) -> datetime:
        here = connection.on_key_node(self.client, self.keys.store("state"))
        seconds, micros = connection.call(
            lambda: self.client.time(**here), repeatable=True, what="now"
        )
        return from_ms(int(seconds) * 1000 + int(micros) // 1000)

    # --- producing ---------------------------------------------------------------------

    def enqueue(self, records: Sequence[TaskResult]) -> list[TaskResult]:
        if isinstance(records, CheckedRecords) and len(records) > 1:
            return self._enqueue_calls(records)
        records = list(records)
        size = self.options.enqueue_batch
        if len(records) <= size:
            payloads = arguments.payloads(records)  # all checked and encoded before any is sent
            if len(records) == 1:  # the usual call: Broker.enqueue
                return self._enqueue_one(records, payloads[0])
            if not records:
                return []
            now, *rows = self._evalsha(
                *self._enqueue_call(scripts.load("enqueue"), records, payloads), repeatable=True
            )
            return arguments.enqueued_many(rows, records, now)
        # Larger batches: one pipeline of script calls. Every record is
        # checked before any call is sent; each call is then encoded, packed
        # and written in turn, so the server runs the first while the rest
        # are made. Each reply (the server time, then a row per record; see
        # enqueue.lua) is answered as it is read, while the server runs the
        # next call.
        arguments.check_records(records)
        script, encode = scripts.load("enqueue"), codec.EnqueuedEncoder()

        def call(start: int, stop: int) -> scripts.Call:
            chunk = records[start:stop]
            return self._enqueue_call(script, chunk, arguments.encoded(chunk, encode))

        def answer(reply: Any, start: int, stop: int) -> list[TaskResult]:
            now, *rows = reply
            return arguments.enqueued_many(rows, records[start:stop], now)

        return self._enqueue_pipelined(len(records), call, answer)

    def _enqueue_calls(self, calls: CheckedRecords) -> list[TaskResult]:
        """`enqueue` of a broker's batch (`Broker.enqueue_many`), from its parts.

        As the long batch of `enqueue`, with no check (the batch was checked
        when it was made), and each record made once: the one returned,
        from the stored state and the call's parts (`enqueued_calls`). The
        payloads are encoded from the parts, a call of the script at a time.
        """
        script, encode = scripts.load("enqueue"), codec.EnqueuedEncoder()
        shared, ids = calls.shared, calls.ids
        keys = self._script_keys(script, {}, [self.keys.notify(shared.queue)])
        run_after = "" if shared.run_after is None else to_ms(shared.run_after)
        notify_index = len(script.key_names) + 1  # the KEYS index of the one notify list

        def call(start: int, stop: int) -> scripts.Call:
            payloads = arguments.encoded_calls(calls, start, stop, encode)
            args: list[Any] = [self.options.notify_cap, stop - start, shared.queue]
            args += (shared.priority, run_after, notify_index)
            args += itertools.chain.from_iterable(zip(ids[start:stop], payloads, strict=True))
            return script, keys, args

        def answer(reply: Any, start: int, stop: int) -> list[TaskResult]:
            now, *rows = reply
            return arguments.enqueued_calls(rows, calls, start, now)

        return self._enqueue_pipelined(len(calls), call, answer)

    def _enqueue_pipelined(
        self,
        count: int,
        call: Callable[[int, int], scripts.Call],
        answer: Callable[[Any, int, int], list[TaskResult]],
    ) -> list[TaskResult]:
        """`count` records stored by ``enqueue.lua`` calls of `enqueue_batch`, in one pipeline.

        ``call(start, stop)`` makes the call of records `start` to `stop`
        as it is sent; ``answer(reply, start, stop)`` reads its reply (the
        server time, then a row per record) as it comes back, while the
        server runs the next call. Returns every answer, in order.
        """
        size = self.options.enqueue_batch
        starts = range(0, count, size)
        answered: list[list[TaskResult]] = [[] for _ in starts]

        def make(index: int) -> scripts.Call:
            start = starts[index]
            return call(start, min(start + size, count))

        def take(index: int, reply: Any) -> None:
            start = starts[index]
            answered[index] = answer(reply, start, min(start + size, count))

        self._evalsha_many(scripts.LazyCalls(len(starts), make), take)
        return [result for chunk in answered for result in chunk]

    def _enqueue_one(self, records: list[TaskResult], payload: bytes) -> list[TaskResult]:
        """`enqueue` of one record, by ``enqueue_one.lua``: the batch script's work, in less."""
        record = records[0]
        script = scripts.load("enqueue_one")
        keys = self._enqueue_one_keys.get(record.queue)
        if keys is None:
            if len(self._enqueue_one_keys) >= 1000:  # bounded, whatever queues come and go
                self._enqueue_one_keys.clear()
            keys = self._enqueue_one_keys[record.queue] = self._script_keys(
                script, {"notify": self.keys.notify(record.queue)}, ()
            )
        run_after = record.run_after
        args = [
            self.options.notify_cap,
            record.id,
            payload,
            record.queue,
            record.priority,
            "" if run_after is None else to_ms(run_after),
        ]
        now, row = self._evalsha(script, keys, args, repeatable=True)
        return arguments.enqueued_many([row], records, now)

    def _enqueue_call(
        self, script: scripts.Script, records: Sequence[TaskResult], payloads: Sequence[bytes]
    ) -> scripts.Call:
        """An ``enqueue.lua`` call of `records`, in runs sharing queue, priority and run_after."""
        first = len(script.key_names) + 1  # KEYS index of the first notify list
        notify: dict[str, int] = {}  # queue -> KEYS index of its notify list
        args: list[Any] = [self.options.notify_cap]
        run: tuple[str, int, datetime | None] | None = None
        at = 0  # where the current run's length is
        for record, payload in zip(records, payloads, strict=True):
            queue, priority, run_after = record.queue, record.priority, record.run_after
            if run is None or queue != run[0] or priority != run[1] or run_after != run[2]:
                run = (queue, priority, run_after)
                index = notify.get(queue)
                if index is None:
                    index = notify[queue] = first + len(notify)
                at = len(args)
                args += (0, queue, priority, "" if run_after is None else to_ms(run_after), index)
            args[at] += 1
            args += (record.id, payload)
        keys = self._script_keys(script, {}, [self.keys.notify(queue) for queue in notify])
        return script, keys, args

    def _evalsha_many(
        self, calls: Sequence[scripts.Call], each: Callable[[int, Any], None]
    ) -> None:
        """Repeatable script calls in one round trip; `each(index, result)` takes each result.

        On a held connection each result is taken as it is read (see
        `scripts.evalsha_many_held`); a repeat after a dropped connection
        takes every result again.
        """
        held = self._held
        what = calls[0][0].name
        if held is None:
            results = connection.call(
                lambda: scripts.evalsha_many(self.client, calls), repeatable=True, what=what
            )
            for index, result in enumerate(results):
                each(index, result)
            return
        connection.call(
            lambda: scripts.evalsha_many_held(held, calls, each), repeatable=True, what=what
        )

    # --- working -----------------------------------------------------------------------

    def claim(
        self, queues: Sequence[str], *, worker: str, lease_ttl: timedelta, limit: int = 1
    ) -> list[Lease]:
        names = arguments.queue_names(queues)
        head = [encode_worker(worker), arguments.positive_ms("lease_ttl", lease_ttl)]
        arguments.limit(limit)
        if not names:
            return []

        def take(want: int) -> Sequence[Any]:
            # A receipt per call (not per repeat): a repeat after a lost reply
            # is answered with the leases the first send granted.
            receipt = self.keys.claim_receipt(uuid.uuid4().hex)
            rows: Sequence[Any] = self._run(
                "claim", [*head, want, *names], repeatable=True, keys_repeat=False, receipt=receipt
            )
            return rows

        return self._filled(limit, take)

    def _filled(self, limit: int, take: Callable[[int], Sequence[Any]]) -> list[Lease]:
        """Leases from claim rows of `take(n)` calls, poison quarantined and not counted.

        One call unless a claim found poison: then the rest of `limit` is
        claimed again, so poison never costs a worker its share of tasks.
        """
        leases: list[Lease] = []
        while len(leases) < limit:
            want = limit - len(leases)
            rows = [Row.parse(reply) for reply in take(want)]
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
        ttl = arguments.positive_ms("lease_ttl", lease_ttl)
        reply = self._run("extend", [lease.task_id, lease.token, ttl], repeatable=True)
        return extended(reply, lease)

    def extend_many(self, leases: Sequence[Lease], lease_ttl: timedelta) -> list[Lease | None]:
        ttl = arguments.positive_ms("lease_ttl", lease_ttl)
        if not leases:
            return []
        args: list[Any] = [ttl]
        for lease in leases:
            args += [lease.task_id, lease.token]
        reply = self._run("extend_many", args, repeatable=True)
        return [extended(item, lease) for item, lease in zip(reply, leases, strict=True)]

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
            arguments.delay_ms(delay),
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
            args += ["retry", d.lease.task_id, d.lease.token, arguments.delay_ms(d.retry_delay)]
            args += [
                codec.encode_errors(d.record.errors),
                "",
                first + queues.index(d.lease.record.queue),
            ]
        if not decisions:
            return []
        reply = self._decide(args, [self.keys.notify(queue) for queue in queues])
        return [decided(row, d) for row, d in zip(reply, decisions, strict=True)]

    def _decide(self, decisions: list[Any], notify: list[str]) -> Any:
        head = [self._ttl_ms, self.options.prune_batch, self.options.notify_cap]
        return self._run("decide_many", head + decisions, repeatable=True, extra_keys=notify)

    def release(self, leases: Sequence[Lease]) -> list[TaskResult | None]:
        if not leases:
            return []
        args: list[Any] = []
        for lease in leases:
            args += [lease.task_id, lease.token]
        # Repeatable: the first send clears the tokens, so a repeat is refused, changing nothing.
        reply = self._run("release", args, repeatable=True)
        released = [answer(row, lease.record) for row, lease in zip(reply, leases, strict=True)]
        self._notify(list(dict.fromkeys(r.queue for r in released if r is not None)))
        return released

    def wait_for_tasks(self, queues: Sequence[str], timeout: timedelta) -> bool:
        """Block on the queues' notify lists (BLPOP) until a task may be ready, or `timeout`.

        Each BLPOP borrows its own pooled connection for the wait. It blocks
        for less than the client's socket timeout, repeating if need be, so a
        quiet wait is never mistaken for a dead connection: an idle worker
        costs one command per `timeout` (or per socket timeout, if shorter).
        True when a wake-up token was taken, False when `timeout` passed
        without one.
        """
        keys = [self.keys.notify(queue) for queue in arguments.queue_names(queues)]
        if not keys:  # nothing could wake us; returning at once would let a caller spin
            time.sleep(max(timeout.total_seconds(), 0.0))
            return False
        deadline = time.monotonic() + timeout.total_seconds()
        socket_timeout = connection.socket_timeout(self.client)
        longest = max(socket_timeout - 1.0, 0.1) if socket_timeout else None
        while True:
            remaining = round(deadline - time.monotonic(), 3)
            if remaining <= 0:  # BLPOP 0 would block forever
                return False
            block = min(remaining, longest) if longest else remaining
            woken = connection.call(
                functools.partial(self.client.blpop, keys, block), repeatable=True, what="wait"
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

        connection.call(push, repeatable=True, what="notify")

    # --- maintenance -------------------------------------------------------------------

    def claim_expired(self, *, limit: int, claim_ttl: timedelta) -> list[Lease]:
        ttl = arguments.positive_ms("claim_ttl", claim_ttl)
        return self._filled(
            arguments.limit(limit),
            lambda want: self._run("claim_expired", [want, ttl], repeatable=False),
        )

    def promote_due(self, *, limit: int) -> int:
        args = [arguments.limit(limit), self._ttl_ms, self.options.prune_batch]
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
            arguments.offset(offset),
            arguments.limit(limit),
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
        super().rates(window)  # the argument check
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
        status = TaskResultStatus(status)
        if status is TaskResultStatus.RUNNING:
            raise ValueError("RUNNING cannot be purged: a running task belongs to its lease holder")
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

        With it go the scripts' held connections. Those of a given client are
        its pool's, shared by every backend on it: they stay, for the next
        backend, and go when the pool is dropped.
        """
        if self._owns_client:
            if self._held is not None:
                self._held.close()
            self.client.close()
