"""A backend that fails on cue: the memory backend behind a switch that makes outages.

`FlakyBackend.fail(operation, times)` makes the next `times` calls of that
operation raise `BackendUnavailable` without reaching the store; with
``applied=True`` each is applied first and only its reply is lost, as when a
connection drops after the server acted. `fail_all(times)` does the same for
every operation. `before` runs as each failure happens, so a test can act
in the middle of an outage (advance the clock, run the reaper). `calls`
counts every call by operation, failed or not, so a test can tell how often
a loop calls the backend.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TypeVar

import attrs

from threadmill_core.backend import Backend, SchedulePause
from threadmill_core.errors import BackendUnavailable
from threadmill_core.live_workers import WorkerInfo
from threadmill_core.models import (
    Decision,
    Lease,
    Progress,
    QueueCounts,
    TaskResult,
    TaskResultStatus,
)

T = TypeVar("T")


@attrs.define
class _Cue:
    times: int
    applied: bool
    before: Callable[[], None] | None


class FlakyBackend(Backend):
    """`inner` with outages on cue; `failures` counts the calls that failed, by operation."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self.failures: dict[str, int] = {}
        self._cues: dict[str, _Cue] = {}
        self._lock = threading.Lock()

    def fail(
        self,
        operation: str,
        times: int = 1,
        *,
        applied: bool = False,
        before: Callable[[], None] | None = None,
    ) -> None:
        with self._lock:
            self._cues[operation] = _Cue(times, applied, before)

    def fail_all(self, times: int) -> None:
        self.fail("*", times)

    def _through(self, operation: str, call: Callable[[], T]) -> T:
        with self._lock:
            self.calls[operation] += 1
            cue = self._cues.get(operation) or self._cues.get("*")
            failing = cue is not None and cue.times > 0
            if cue is not None and failing:
                cue.times -= 1
                self.failures[operation] = self.failures.get(operation, 0) + 1
        if not failing or cue is None:
            return call()
        if cue.before is not None:
            cue.before()
        if cue.applied:
            call()
        raise BackendUnavailable(f"connection lost during {operation} (test)")

    # --- the storage interface, delegated ------------------------------------------------

    def now(self) -> datetime:
        return self._through("now", self.inner.now)

    def enqueue(self, records: Sequence[TaskResult]) -> list[TaskResult]:
        return self._through("enqueue", lambda: self.inner.enqueue(records))

    def claim(
        self, queues: Sequence[str], *, worker: str, lease_ttl: timedelta, limit: int = 1
    ) -> list[Lease]:
        return self._through(
            "claim",
            lambda: self.inner.claim(queues, worker=worker, lease_ttl=lease_ttl, limit=limit),
        )

    def release(
        self, leases: Sequence[Lease], delay: timedelta = timedelta(0)
    ) -> list[TaskResult | None]:
        return self._through("release", lambda: self.inner.release(leases, delay))

    def mark_started(self, leases: Sequence[Lease]) -> list[bool]:
        return self._through("mark_started", lambda: self.inner.mark_started(leases))

    def record_progress(self, updates: Sequence[tuple[Lease, Progress]]) -> list[bool]:
        return self._through("record_progress", lambda: self.inner.record_progress(updates))

    def extend(self, lease: Lease, lease_ttl: timedelta) -> Lease | None:
        return self._through("extend", lambda: self.inner.extend(lease, lease_ttl))

    def extend_many(self, leases: Sequence[Lease], lease_ttl: timedelta) -> list[Lease | None]:
        return self._through("extend_many", lambda: self.inner.extend_many(leases, lease_ttl))

    def complete(self, lease: Lease, record: TaskResult) -> TaskResult | None:
        return self._through("complete", lambda: self.inner.complete(lease, record))

    def retry(self, lease: Lease, record: TaskResult, delay: timedelta) -> TaskResult | None:
        return self._through("retry", lambda: self.inner.retry(lease, record, delay))

    def decide_many(self, decisions: Sequence[Decision]) -> list[TaskResult | None]:
        return self._through("decide_many", lambda: self.inner.decide_many(decisions))

    def wait_for_tasks(self, queues: Sequence[str], timeout: timedelta) -> bool:
        return self._through("wait_for_tasks", lambda: self.inner.wait_for_tasks(queues, timeout))

    def next_due(self) -> timedelta | None:
        return self._through("next_due", self.inner.next_due)

    def claim_expired(self, *, limit: int, claim_ttl: timedelta) -> list[Lease]:
        return self._through(
            "claim_expired", lambda: self.inner.claim_expired(limit=limit, claim_ttl=claim_ttl)
        )

    def expire_leases(self, worker: str) -> int:
        return self._through("expire_leases", lambda: self.inner.expire_leases(worker))

    def promote_due(self, *, limit: int) -> int:
        return self._through("promote_due", lambda: self.inner.promote_due(limit=limit))

    def get(self, task_id: str) -> TaskResult | None:
        return self._through("get", lambda: self.inner.get(task_id))

    def peek(
        self, queue: str, status: TaskResultStatus, *, offset: int = 0, limit: int = 100
    ) -> list[TaskResult]:
        return self._through(
            "peek", lambda: self.inner.peek(queue, status, offset=offset, limit=limit)
        )

    def counts(self) -> Mapping[str, QueueCounts]:
        return self._through("counts", self.inner.counts)

    def requeue(self, task_id: str) -> TaskResult | None:
        return self._through("requeue", lambda: self.inner.requeue(task_id))

    def request_cancel(self, task_id: str) -> TaskResult | None:
        return self._through("request_cancel", lambda: self.inner.request_cancel(task_id))

    def cancel(self, task_id: str) -> TaskResult | None:
        return self._through("cancel", lambda: self.inner.cancel(task_id))

    def purge(self, queue: str, status: TaskResultStatus) -> int:
        return self._through("purge", lambda: self.inner.purge(queue, status))

    def set_schedule_paused(self, name: str, paused: bool) -> SchedulePause:
        return self._through(
            "set_schedule_paused", lambda: self.inner.set_schedule_paused(name, paused)
        )

    def schedule_pauses(self) -> dict[str, SchedulePause]:
        return self._through("schedule_pauses", self.inner.schedule_pauses)

    def register_worker(self, info: WorkerInfo, ttl: timedelta) -> WorkerInfo:
        return self._through("register_worker", lambda: self.inner.register_worker(info, ttl))

    def unregister_worker(self, worker_id: str) -> bool:
        return self._through("unregister_worker", lambda: self.inner.unregister_worker(worker_id))

    def workers(self) -> list[WorkerInfo]:
        return self._through("workers", self.inner.workers)

    def close(self) -> None:
        self.inner.close()
