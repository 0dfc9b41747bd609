"""Storing new tasks (`Backend.enqueue`, `Backend.enqueue_calls`), a part of `RedisBackend`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from threadmill_core.backend import TaskCall
from threadmill_core.checks import check_calls, check_records
from threadmill_core.models import TaskResult
from threadmill_redis import arguments, scripts
from threadmill_redis.boundary import call
from threadmill_redis.errors import RedisBackendError
from threadmill_redis.host import Host
from threadmill_redis.replies import enqueued


class RedisEnqueue(Host):
    """`enqueue` and `enqueue_calls`: every task through ``enqueue.lua``."""

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
