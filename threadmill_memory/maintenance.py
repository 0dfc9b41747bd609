"""The memory backend's maintenance: the reaper's pass, cut leases, due deferred tasks."""

from __future__ import annotations

from datetime import timedelta

import attrs

from threadmill_core.backend import NOTHING_DEFERRED
from threadmill_core.checks import check_limit, ttl_ms
from threadmill_core.clock import from_ms
from threadmill_core.models import Lease, TaskResultStatus
from threadmill_memory import _leases
from threadmill_memory._state import MemoryState
from threadmill_memory._store import Entry

DEFERRED = TaskResultStatus.DEFERRED
RUNNING = TaskResultStatus.RUNNING


class MemoryMaintenance(MemoryState):
    """`claim_expired`, `expire_leases`, `next_due` and `promote_due`."""

    def claim_expired(self, *, limit: int, claim_ttl: timedelta) -> list[Lease]:
        """The reaper's pass; an undecodable task it meets is quarantined, given back or not."""
        check_limit(limit)
        claim_ms = ttl_ms("claim_ttl", claim_ttl)
        with self._lock:
            now_ms = self._begin()
            deadline_ms = now_ms + claim_ms
            leases: list[Lease] = []
            given_back = False
            for _key, task_id in self._store.up_to(RUNNING, now_ms, None):
                if len(leases) == limit:
                    break
                entry = self._store[task_id]
                record = self._decode_or_quarantine(entry, now_ms)
                if record is None:
                    continue
                if self._unstarted(entry):
                    # Never ran: back to READY uncharged (CANCELLED if a cancel was
                    # requested), and counted toward the bound.
                    self._give_back(entry, record, entry.unstarted_expiries + 1, now_ms)
                    given_back = True
                    continue
                if record.cancel_requested_at is not None:  # it never goes back: CANCELLED
                    self._finalize_cancelled(record, now_ms, token=None)
                    continue
                token = self._new_token()  # not an attempt: the record itself is unchanged
                claimed = attrs.evolve(
                    entry, key=(deadline_ms,), token=token, started=False, reaped=True
                )
                self._store.put(claimed)
                leases.append(Lease(token=token, deadline=from_ms(deadline_ms), record=record))
            if given_back:
                self._ready.notify_all()
            return leases

    def expire_leases(self, worker: str) -> int:
        with self._lock:
            return _leases.expire(self._store, worker, self._begin())

    @staticmethod
    def _unstarted(entry: Entry) -> bool:
        """Whether an expiry of `entry`'s claim goes back uncharged (see `claim_expired`)."""
        return entry.token is not None and not entry.started and not entry.reaped

    def next_due(self) -> timedelta | None:
        with self._lock:
            now_ms = self._begin()
            firsts = [self._store.first(queue, DEFERRED) for queue in self._store.queues()]
            due_ms = [first[0][0] for first in firsts if first is not None]
        if not due_ms:
            return NOTHING_DEFERRED
        return timedelta(milliseconds=max(min(due_ms) - now_ms, 0))

    def promote_due(self, *, limit: int) -> int:
        check_limit(limit)
        with self._lock:
            now_ms = self._begin()
            return self._promote(self._store.up_to(DEFERRED, now_ms, None)[:limit])
