"""The Redis backend's live workers (`Backend.register_worker`), a mixin of its own.

Two keys per namespace (see `threadmill_redis.keys`): a hash of worker id ->
``"<last seen ms>|<packed entry>"`` and a sorted set of worker id -> expiry
ms, both on the namespace's hash tag. Each call is one script
(``register_worker.lua``, ``unregister_worker.lua``, ``workers.lua``), on
the server's clock, and each first deletes entries whose time is up.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from threadmill_core.live_workers import WorkerInfo, check_worker, check_worker_id, unpack

if TYPE_CHECKING:
    from threadmill_redis.keys import Keys


class RedisLiveWorkers:
    """`register_worker`, `unregister_worker` and `workers` for `RedisBackend`."""

    if TYPE_CHECKING:
        keys: Keys

        def _run(
            self,
            name: str,
            args: Sequence[Any],
            *,
            repeatable: bool,
            extra_keys: Sequence[str] = (),
            **named_keys: str,
        ) -> Any: ...

    def _entry_keys(self) -> dict[str, str]:
        return {name: self.keys.store(name) for name in ("live_workers", "live_worker_expiry")}

    def register_worker(self, info: WorkerInfo, ttl: timedelta) -> WorkerInfo:
        packed, ms = check_worker(info, ttl)
        now = self._run(
            "register_worker",
            [info.id, packed, ms],
            repeatable=True,  # a repeat stores the same entry again
            **self._entry_keys(),
        )
        return unpack(packed, int(now))

    def unregister_worker(self, worker_id: str) -> bool:
        check_worker_id(worker_id)
        deleted = self._run("unregister_worker", [worker_id], repeatable=True, **self._entry_keys())
        return bool(deleted)

    def workers(self) -> list[WorkerInfo]:
        values = self._run("workers", [], repeatable=True, **self._entry_keys())
        found = []
        for value in values:
            if not value:  # an expiry without its entry: not a live worker
                continue
            text = value.decode() if isinstance(value, bytes) else value
            seen, _, packed = text.partition("|")
            found.append(unpack(packed, int(seen)))
        return found
