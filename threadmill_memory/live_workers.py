"""The memory backend's live workers (`Backend.register_worker`), a mixin of its own.

Entries are kept packed (`threadmill_core.live_workers.pack`), as the other
backends keep them, so what reads back is what they would answer.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

from threadmill_core.clock import to_ms
from threadmill_core.live_workers import WorkerInfo, check_worker, check_worker_id, unpack

#: Guards the first use's making of a backend's entries.
_making = threading.Lock()

#: A worker id -> (its packed entry, last seen ms, expiry ms).
Entries = dict[str, tuple[str, int, int]]


class MemoryLiveWorkers:
    """Entries in a dict under a lock of their own; the class mixing it in gives `now`.
    Expired entries are dropped on every call."""

    def now(self) -> datetime:  # pragma: no cover - the backend's own `now` is used
        raise NotImplementedError

    def _live_state(self) -> tuple[threading.Lock, Entries]:
        state: tuple[threading.Lock, Entries] | None = getattr(self, "_live_workers", None)
        if state is None:
            with _making:
                state = getattr(self, "_live_workers", None)
                if state is None:
                    state = (threading.Lock(), {})
                    self._live_workers = state
        return state

    def register_worker(self, info: WorkerInfo, ttl: timedelta) -> WorkerInfo:
        packed, ms = check_worker(info, ttl)
        lock, entries = self._live_state()
        with lock:
            now_ms = to_ms(self.now())
            _prune(entries, now_ms)
            entries[info.id] = (packed, now_ms, now_ms + ms)
            return unpack(packed, now_ms)

    def unregister_worker(self, worker_id: str) -> bool:
        check_worker_id(worker_id)
        lock, entries = self._live_state()
        with lock:
            _prune(entries, to_ms(self.now()))
            return entries.pop(worker_id, None) is not None

    def workers(self) -> list[WorkerInfo]:
        lock, entries = self._live_state()
        with lock:
            _prune(entries, to_ms(self.now()))
            return [unpack(*entries[worker_id][:2]) for worker_id in sorted(entries)]


def _prune(entries: Entries, now_ms: int) -> None:
    """Drop every entry whose time is up at `now_ms`."""
    for worker_id in [i for i, (_, _, expiry) in entries.items() if expiry <= now_ms]:
        del entries[worker_id]
