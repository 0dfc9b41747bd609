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
`record_progress` (storing again moves only the stamp), `request_cancel`
(the first request wins),
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
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import redis

from threadmill_core import codec
from threadmill_core.backend import (
    NOTHING_DEFERRED,
    Backend,
)
from threadmill_core.checks import (
    check_decision,
    check_delay,
    check_limit,
    check_progress_updates,
    queue_names,
    ttl_ms,
)
from threadmill_core.clock import duration_ms, from_ms
from threadmill_core.errors import InvalidOption
from threadmill_core.models import (
    Decision,
    Lease,
    Progress,
    TaskResult,
    TaskResultStatus,
)
from threadmill_redis import arguments, clients, connections, scripts
from threadmill_redis.boundary import call
from threadmill_redis.claiming import RedisClaims
from threadmill_redis.clients import Client
from threadmill_redis.errors import RedisUnavailable
from threadmill_redis.inspection import RedisInspection
from threadmill_redis.keys import CONTROL, STARTS, STORE, TELEMETRY, Keys
from threadmill_redis.live_workers import RedisLiveWorkers
from threadmill_redis.options import RedisOptions, split_url
from threadmill_redis.pauses import RedisPauses
from threadmill_redis.producing import RedisEnqueue
from threadmill_redis.replies import (
    answer,
    completed,
    decided,
    encode_worker,
    extended,
    marked,
)

log = logging.getLogger("threadmill_redis")

SCHEMES = tuple(clients.SCHEMES)


#: The names of the namespace-wide keys a script header may declare.
SCHEMA = frozenset(STORE + TELEMETRY + STARTS + CONTROL)


class RedisBackend(
    RedisPauses, RedisLiveWorkers, RedisEnqueue, RedisClaims, RedisInspection, Backend
):
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

    # --- working -----------------------------------------------------------------------

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

    def record_progress(self, updates: Sequence[tuple[Lease, Progress]]) -> list[bool]:
        """Stores the batch with one ``record_progress.lua``; repeated after a lost reply
        (storing the same progress again is harmless: only its ``updated_at`` moves)."""
        checked = check_progress_updates(updates)
        if not checked:
            return []
        args: list[Any] = []
        for lease, progress in checked:
            args += [lease.task_id, lease.token, arguments.progress_head(progress)]
        reply = self._run("record_progress", args, repeatable=True)
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
            completed(d, finished_at) if isinstance(row, int) else decided(row, d, finished_at)
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
        back = (r for r in released if r is not None and r.status is TaskResultStatus.READY)
        self._notify(list(dict.fromkeys(r.queue for r in back)))
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
