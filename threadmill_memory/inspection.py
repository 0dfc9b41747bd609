"""The memory backend's inspection (get, peek, rates, counts) and operator actions."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

import attrs

from threadmill_core.checks import check_limit, check_offset, check_purgeable, check_window
from threadmill_core.clock import from_ms
from threadmill_core.models import QueueCounts, QueueRates, TaskResult, TaskResultStatus
from threadmill_memory._state import MemoryState

READY = TaskResultStatus.READY
DEFERRED = TaskResultStatus.DEFERRED
RUNNING = TaskResultStatus.RUNNING
FAILED = TaskResultStatus.FAILED
CANCELLED = TaskResultStatus.CANCELLED


class MemoryInspection(MemoryState):
    """`get`, `peek`, `rates`, `counts`, and the operator's `requeue`, `cancel`,
    `request_cancel` and `purge`."""

    def get(self, task_id: str) -> TaskResult | None:
        with self._lock:
            self._begin()
            entry = self._store.get(task_id)
            return None if entry is None else self._decode(entry)

    def peek(
        self,
        queue: str,
        status: TaskResultStatus,
        *,
        offset: int = 0,
        limit: int = 100,
    ) -> list[TaskResult]:
        status = TaskResultStatus(status)
        check_limit(limit)
        check_offset(offset)
        with self._lock:
            self._begin()
            items = self._store.slice(queue, status, offset, limit)
            return [self._decode(self._store[task_id]) for _key, task_id in items]

    def rates(self, window: timedelta) -> Mapping[str, QueueRates] | None:
        """Counted in one-second buckets over the last hour (`RATE_HISTORY`), on the clock."""
        check_window(window)
        with self._lock:
            now_ms = self._begin()
            covered, totals = self._history.window(now_ms, window)
            return {
                queue: QueueRates(queue=queue, window=covered, entered=entered, finished=finished)
                for queue, (entered, finished) in sorted(totals.items())
            }

    def counts(self) -> Mapping[str, QueueCounts]:
        with self._lock:
            self._begin()
            return {
                queue: QueueCounts(
                    queue=queue,
                    **{s.value.lower(): self._store.count(queue, s) for s in TaskResultStatus},
                )
                for queue in self._store.queues()
            }

    # --- operator actions ------------------------------------------------------------

    def requeue(self, task_id: str) -> TaskResult | None:
        with self._lock:
            now_ms = self._begin()
            entry = self._store.get(task_id)
            if entry is None or entry.status not in {FAILED, CANCELLED}:
                return None
            again = attrs.evolve(
                self._decode(entry),
                status=READY,
                finished_at=None,
                return_value=None,
                progress=None,
                cancel_requested_at=None,
            )
            stored = self._put_ready(again, token=None)
            self._history.record(entry.queue, now_ms, entered=1)
            return stored

    def cancel(self, task_id: str) -> TaskResult | None:
        with self._lock:
            now_ms = self._begin()
            entry = self._store.get(task_id)
            if entry is None or entry.status not in {READY, DEFERRED}:
                return None
            cancelled = attrs.evolve(
                self._decode(entry), status=CANCELLED, finished_at=from_ms(now_ms)
            )
            stored = self._put(cancelled, (now_ms,), token=None)
            self._history.record(entry.queue, now_ms, finished=1)
            return stored

    def request_cancel(self, task_id: str) -> TaskResult | None:
        with self._lock:
            now_ms = self._begin()
            entry = self._store.get(task_id)
            if entry is None or entry.status is not RUNNING:
                return None
            current = self._decode(entry)
            if current.cancel_requested_at is not None:
                return current  # the first request wins
            return self._rewrite(entry, attrs.evolve(current, cancel_requested_at=from_ms(now_ms)))

    def purge(self, queue: str, status: TaskResultStatus) -> int:
        status = check_purgeable(status)
        with self._lock:
            self._begin()
            return self._store.purge(queue, status)
