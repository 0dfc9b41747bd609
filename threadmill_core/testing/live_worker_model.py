"""The live workers' entries as the protocol keeps them: a naive model, a plain dict.

`Backend.register_worker` stores an entry, seen now, until ``now + ttl``
(replacing any entry of that id); `unregister_worker` deletes it and says
whether a live one was there; `workers` lists the live entries by id. The
kit's scenarios (`threadmill_core.testing._scenarios.live_workers`) run
`LiveWorkerModel` beside the backend.
"""

from __future__ import annotations

import attrs

from threadmill_core.live_workers import WorkerInfo


class LiveWorkerModel:
    """Each worker's entry (last seen left unset) and its expiry, in ms, by id."""

    def __init__(self) -> None:
        self.entries: dict[str, tuple[WorkerInfo, int]] = {}

    def register(self, info: WorkerInfo, ttl_ms: int, now_ms: int) -> None:
        """What `register_worker(info, ttl)` leaves, at `now_ms`."""
        self.entries[info.id] = (attrs.evolve(info, last_seen=None), now_ms + ttl_ms)

    def unregister(self, worker_id: str, now_ms: int) -> bool:
        """What `unregister_worker(worker_id)` answers at `now_ms` (and leaves)."""
        entry = self.entries.pop(worker_id, None)
        return entry is not None and entry[1] > now_ms

    def listed(self, now_ms: int) -> list[WorkerInfo]:
        """What `workers()` lists at `now_ms`, last seen left unset."""
        return [info for i, (info, expiry) in sorted(self.entries.items()) if expiry > now_ms]
