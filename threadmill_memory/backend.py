"""The in-memory reference backend: each operation one atomic step under one lock.

`MemoryBackend` is the unit-test broker and an executable reading of
`threadmill_core.backend`. Like Redis it stores every task as the codec's
bytes, so a value the codec cannot carry fails here too, and every record it
hands out is decoded afresh, so no caller can reach stored state through a
returned object. Beside the bytes it keeps only what places the task (see
`threadmill_memory._store`).

Time is the injected clock (`SystemClock` by default) truncated to whole
milliseconds; on a `FakeClock`, tests make retries due and leases expire by
advancing it. Results expire lazily: every operation first drops terminal
tasks whose `finished_at + result_ttl` is not after `now()`.

Recorded starts: each entry notes whether its current token is a worker's
claim whose start was recorded (`mark_started`) or a reaper's claim, and
how many unstarted claims of it expired and were given back; every new
token clears the first two, and the count is carried over every change
until the entry is deleted.

Telemetry (`rates`): tasks entering and finishing are counted per queue in
one-second buckets of that clock, in the same locked step as the change, and
buckets older than `RATE_HISTORY` (an hour) are dropped, so each queue holds
at most 3,600 of them.

Poison (stored bytes that do not decode to this task; only `_plant_raw` can
put them here): `claim` and `claim_expired` replace it with a FAILED record
that keeps what the backend knows beside the bytes (id, queue, priority) and
carries one `TaskQuarantined` error saying why, and go on looking for tasks,
so a poisoned task does not use up `limit`. `promote_due` moves poison as
opaque bytes; `counts` and `purge` never decode, so `purge` always gets rid
of it. Reads that must return the record (`get`, `peek`, `cancel`,
`requeue`, `enqueue` of that id) raise `PayloadError` naming the task:
there is no record to return, and None would say the task does not exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import attrs

from threadmill_core.backend import Backend
from threadmill_core.checks import check_records
from threadmill_core.clock import from_ms, to_ms
from threadmill_core.models import TaskResult, TaskResultStatus
from threadmill_memory._state import RATE_BUCKET
from threadmill_memory._store import Entry, SortKey
from threadmill_memory.inspection import MemoryInspection
from threadmill_memory.live_workers import MemoryLiveWorkers
from threadmill_memory.maintenance import MemoryMaintenance
from threadmill_memory.pauses import MemoryPauses
from threadmill_memory.working import MemoryWorking

__all__ = ["RATE_BUCKET", "MemoryBackend"]

READY = TaskResultStatus.READY
DEFERRED = TaskResultStatus.DEFERRED
RUNNING = TaskResultStatus.RUNNING


class MemoryBackend(
    MemoryWorking,
    MemoryMaintenance,
    MemoryInspection,
    MemoryPauses,
    MemoryLiveWorkers,
    Backend,
):
    """Tasks in this process's memory; thread-safe, gone when the process ends.

    `clock` is the time every operation reads (`SystemClock` by default);
    `result_ttl` (positive) is how long terminal tasks stay readable after
    `finished_at`. `close` wakes every `wait_for_tasks` caller and makes later
    waits return at once; the stored tasks stay readable.

    Built by job: producing, `close` and test support here; the worker's
    calls in `threadmill_memory.working`, the reaper's and promoter's in
    `.maintenance`, reads and operator actions in `.inspection`, schedule
    pauses and live workers in `.pauses` and `.live_workers`; the state they
    share, and the steps every job takes under the lock, in `._state`.
    """

    def __repr__(self) -> str:
        return f"MemoryBackend(clock={self._clock!r}, result_ttl={self._result_ttl!r})"

    # --- producing -------------------------------------------------------------------

    def enqueue(self, records: Sequence[TaskResult]) -> list[TaskResult]:
        records = list(records)
        check_records(records)
        with self._lock:
            now_ms = self._begin()
            # Encode (and so check) every new record before storing any, so a
            # value the codec refuses leaves the whole batch unstored.
            new: dict[str, Entry] = {}
            for record in records:
                if record.id in new:
                    continue
                existing = self._store.get(record.id)
                if existing is not None:
                    self._decode(existing)  # a poisoned id fails here, before any change
                    continue
                new[record.id] = self._prepare(*self._accepted(record, now_ms))[0]
            for entry in new.values():
                self._store.put(entry)
                self._history.record(entry.queue, now_ms, entered=1)
            if any(entry.status is READY for entry in new.values()):
                self._ready.notify_all()
            return [self._decode(self._store[record.id]) for record in records]

    def _accepted(self, record: TaskResult, now_ms: int) -> tuple[TaskResult, SortKey]:
        """`record` as `enqueue` stores it (owned fields reset), and its segment key."""
        run_after_ms = to_ms(record.run_after) if record.run_after is not None else now_ms
        deferred = run_after_ms > now_ms
        stored = attrs.evolve(
            record,
            status=DEFERRED if deferred else READY,
            enqueued_at=from_ms(now_ms),
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            attempts=0,
            errors=(),
            worker_ids=(),
            return_value=None,
            progress=None,
            cancel_requested_at=None,
        )
        return stored, (run_after_ms,) if deferred else self._ready_key(record.priority)

    # --- lifecycle -------------------------------------------------------------------

    def close(self) -> None:
        with self._ready:
            self._closed = True
            self._ready.notify_all()

    # --- test support ----------------------------------------------------------------

    def _plant_raw(
        self,
        task_id: str,
        data: bytes,
        *,
        queue: str = "default",
        status: TaskResultStatus = READY,
        priority: int = 0,
        at: datetime | None = None,
    ) -> None:
        """Test support, not API: store `data` as task `task_id`'s bytes, replacing that task.

        Only the codec writes this backend's storage, so tests plant corrupt or
        foreign bytes (poison) with this. The task sits in `status` of
        `queue`; READY at the tail of `priority`; otherwise at `at` (default
        `now()`), read as `run_after` (DEFERRED), the lease deadline (RUNNING,
        under a token no lease carries) or `finished_at` (terminal).
        """
        with self._lock:
            now_ms = self._begin()
            at_ms = to_ms(at) if at is not None else now_ms
            key = self._ready_key(priority) if status is READY else (at_ms,)
            token = self._new_token() if status is RUNNING else None
            self._store.put(
                Entry(
                    id=task_id,
                    queue=queue,
                    priority=priority,
                    status=status,
                    key=key,
                    data=data,
                    token=token,
                )
            )
            if status is READY:
                self._ready.notify_all()
