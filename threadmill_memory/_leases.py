"""`MemoryBackend.expire_leases`: the live leases of a dead worker, cut short.

See `threadmill_core.backend.Backend.expire_leases` for the contract. The
store keeps no index by worker: the worker of a claim is the last entry of
the record's `worker_ids`, so the RUNNING entries whose lease is still live
are decoded and looked at. That is one pass over the running tasks, made
once per dead worker process.
"""

from __future__ import annotations

import attrs

from threadmill_core.errors import PayloadError
from threadmill_core.models import TaskResultStatus
from threadmill_memory import _payload
from threadmill_memory._store import Store

#: Later than every lease deadline (epoch milliseconds).
_END_OF_TIME_MS = 2**63


def expire(store: Store, worker: str, now_ms: int) -> int:
    """Give every live lease of a claim by `worker` the deadline `now_ms`; how many were cut.

    Called with the backend's lock held. A reaper's claim is left alone, and
    so is an entry whose bytes do not decode (`claim_expired` quarantines it
    when its lease runs out).
    """
    cut = 0
    for key, task_id in store.up_to(TaskResultStatus.RUNNING, _END_OF_TIME_MS, None):
        if key[0] <= now_ms:
            continue  # expired already: the reaper's next pass meets it anyway
        entry = store[task_id]
        if entry.token is None or entry.reaped:
            continue
        try:
            record = _payload.decode(entry.id, entry.data)
        except PayloadError:
            continue
        if record.worker_ids and record.worker_ids[-1] == worker:
            store.put(attrs.evolve(entry, key=(now_ms,)))
            cut += 1
    return cut
