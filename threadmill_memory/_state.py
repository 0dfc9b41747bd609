"""The memory backend's state and the steps its operations share (`MemoryState`).

The underscored steps are called with the lock held, inside one operation:
it reads the clock once (`_begin`, which also drops the results that expired
by then) and stores records through `_put`, which encodes them (see
`threadmill_memory._store` for what sits beside the bytes).
"""

from __future__ import annotations

import itertools
import logging
import threading
from datetime import datetime, timedelta

import attrs

from threadmill_core.backend import RATE_HISTORY
from threadmill_core.clock import Clock, SystemClock, duration_ms, from_ms, to_ms
from threadmill_core.errors import PayloadError
from threadmill_core.models import TaskResult, TaskResultStatus, validate_timedelta
from threadmill_memory import _payload
from threadmill_memory._rates import RateHistory
from threadmill_memory._store import Entry, Item, SortKey, Store

#: The backend's logger, named after the module that holds `MemoryBackend`.
log = logging.getLogger("threadmill_memory.backend")

#: The telemetry's bucket (see `MemoryBackend.rates`).
RATE_BUCKET = timedelta(seconds=1)

READY = TaskResultStatus.READY
DEFERRED = TaskResultStatus.DEFERRED
SUCCESSFUL = TaskResultStatus.SUCCESSFUL
FAILED = TaskResultStatus.FAILED
CANCELLED = TaskResultStatus.CANCELLED


class MemoryState:
    """The store, its lock, the clock and counters; the steps `MemoryBackend`'s jobs share."""

    def __init__(
        self, *, clock: Clock | None = None, result_ttl: timedelta = timedelta(days=1)
    ) -> None:
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._result_ttl = validate_timedelta("result_ttl", result_ttl)
        self._result_ttl_ms = duration_ms(self._result_ttl)
        self._lock = threading.Lock()
        # Signalled whenever a task enters READY; shares the lock, so a waiter
        # checks for work and starts waiting in one step and misses no signal.
        self._ready = threading.Condition(self._lock)
        self._store = Store()
        self._entered_ready = itertools.count()  # the backend-wide "entered READY" order
        self._tokens = itertools.count(1)
        self._history = RateHistory(bucket=RATE_BUCKET, history=RATE_HISTORY)
        self._closed = False

    @property
    def result_ttl(self) -> timedelta:
        return self._result_ttl

    def now(self) -> datetime:
        return from_ms(self._now_ms())

    # --- shared steps (called with the lock held) ------------------------------------

    def _now_ms(self) -> int:
        return to_ms(self._clock.now())

    def _begin(self) -> int:
        """Read the clock once for the operation and drop the results that expired by then."""
        now_ms = self._now_ms()
        cutoff_ms = now_ms - self._result_ttl_ms
        for status in (SUCCESSFUL, FAILED, CANCELLED):
            for _key, task_id in self._store.up_to(status, cutoff_ms, None):
                self._store.delete(task_id)
        return now_ms

    def _ready_key(self, priority: int) -> SortKey:
        return (-priority, next(self._entered_ready))

    def _new_token(self) -> str:
        return str(next(self._tokens))

    def _prepare(
        self, record: TaskResult, key: SortKey, token: str | None = None, expiries: int = 0
    ) -> tuple[Entry, TaskResult]:
        """The entry storing `record` at `key` (under `token`, a worker's claim unstarted,
        its count of unstarted expiries `expiries`), and the record as it reads back.

        Raises `UnsupportedValue` for a value the codec cannot carry, before anything changes.
        """
        data, stored = _payload.encode(record)
        entry = Entry(
            id=record.id,
            queue=record.queue,
            priority=record.priority,
            status=record.status,
            key=key,
            data=data,
            token=token,
            unstarted_expiries=expiries,
        )
        return entry, stored

    def _put(
        self, record: TaskResult, key: SortKey, token: str | None, expiries: int | None = None
    ) -> TaskResult:
        """Store `record`; its count of unstarted expiries is kept unless `expiries` is given."""
        if expiries is None:
            old = self._store.get(record.id)
            expiries = old.unstarted_expiries if old is not None else 0
        entry, stored = self._prepare(record, key, token, expiries)
        self._store.put(entry)
        return stored

    def _put_ready(
        self, record: TaskResult, token: str | None, expiries: int | None = None
    ) -> TaskResult:
        """Store a READY `record` at the tail of its priority level, and wake the waiters."""
        stored = self._put(record, self._ready_key(record.priority), token, expiries)
        self._ready.notify_all()
        return stored

    def _decode(self, entry: Entry) -> TaskResult:
        return _payload.decode(entry.id, entry.data)

    def _decode_or_quarantine(self, entry: Entry, now_ms: int) -> TaskResult | None:
        """The record `entry` holds, or None after finalizing undecodable bytes FAILED."""
        try:
            return self._decode(entry)
        except PayloadError as exc:
            log.warning("quarantining task %r of queue %r: %s", entry.id, entry.queue, exc)
            record = _payload.quarantined(
                entry.id, entry.queue, entry.priority, exc, from_ms(now_ms)
            )
            # No token: a holder of the poisoned task's lease must not take
            # this FAILED record for its own decision, repeated.
            self._put(record, (now_ms,), token=None)
            self._history.record(entry.queue, now_ms, finished=1)
            return None

    def _rewrite(self, entry: Entry, record: TaskResult) -> TaskResult:
        """Store `record` in `entry`'s place: same segment, key, token and claim flags."""
        data, stored = _payload.encode(record)
        self._store.put(attrs.evolve(entry, data=data))
        return stored

    @staticmethod
    def _unclaimed(current: TaskResult) -> TaskResult:
        """`current` with its last claim undone: attempt and worker dropped."""
        attempts = max(current.attempts - 1, 0)
        return attrs.evolve(
            current,
            attempts=attempts,
            worker_ids=current.worker_ids[:-1],
            started_at=current.started_at if attempts else None,
            last_attempted_at=current.last_attempted_at if attempts else None,
        )

    def _finalize_cancelled(
        self, current: TaskResult, now_ms: int, token: str | None, expiries: int | None = None
    ) -> TaskResult:
        """Finalize a task with a cancel request CANCELLED (it never goes back), under `token`."""
        cancelled = attrs.evolve(current, status=CANCELLED, finished_at=from_ms(now_ms))
        stored = self._put(cancelled, (now_ms,), token, expiries)
        self._history.record(current.queue, now_ms, finished=1)
        return stored

    def _give_back(
        self,
        entry: Entry,
        current: TaskResult,
        expiries: int,
        now_ms: int,
        due_ms: int | None = None,
    ) -> TaskResult:
        """Undo the claim `entry` is under: READY tail (DEFERRED till `due_ms` if given),
        attempt and worker undone, no token. A task with a cancel request is finalized
        CANCELLED instead (see `threadmill_core.backend`, "Cancel requests")."""
        if current.cancel_requested_at is not None:
            return self._finalize_cancelled(self._unclaimed(current), now_ms, None, expiries)
        unclaimed = attrs.evolve(self._unclaimed(current), status=READY)
        if due_ms is not None:
            later = attrs.evolve(unclaimed, status=DEFERRED, run_after=from_ms(due_ms))
            return self._put(later, (due_ms,), token=None, expiries=expiries)
        return self._put_ready(unclaimed, token=None, expiries=expiries)

    def _promote(self, due: list[Item]) -> int:
        """Move the DEFERRED tasks `due` to READY, in the order given; keeps their tokens."""
        for _key, task_id in due:
            entry = self._store[task_id]
            key = self._ready_key(entry.priority)
            try:
                record = self._decode(entry)
            except PayloadError:
                # Poison moves as opaque bytes (Lua would not decode it either);
                # `claim` quarantines it.
                self._store.put(attrs.evolve(entry, status=READY, key=key))
            else:
                self._put(attrs.evolve(record, status=READY), key, entry.token)
        if due:
            self._ready.notify_all()
        return len(due)
