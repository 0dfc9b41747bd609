"""Test support: named ways to damage a task stored by a `MemoryBackend` (`Harness.corruptions`).

The memory backend keeps each task's place and fencing state as typed
fields of its entry, which cannot be stored wrong, and the record as codec
bytes beside them: so the one corruption it can hold is bytes that do not
decode, which it quarantines as poison.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from threadmill_memory.backend import MemoryBackend


def corruptions(backend: MemoryBackend) -> dict[str, Callable[[str], None]]:
    """The corruptions `backend` can hold: its stored bytes of a task replaced by garbage."""

    def payload_garbled(task_id: str) -> None:
        with backend._lock:
            entry = backend._store[task_id]
            backend._store.put(attrs.evolve(entry, data=b"{not a record"))

    return {"payload garbled": payload_garbled}
