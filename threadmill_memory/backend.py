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

import itertools
import logging
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

import attrs

from threadmill_core.backend import NOTHING_DEFERRED, RATE_HISTORY, Backend
from threadmill_core.checks import (
    check_decision,
    check_delay,
    check_limit,
    check_offset,
    check_purgeable,
    check_records,
    check_window,
    queue_names,
    ttl_ms,
)
from threadmill_core.clock import Clock, SystemClock, duration_ms, from_ms, to_ms
from threadmill_core.errors import PayloadError
from threadmill_core.models import (
    Decision,
    Lease,
    QueueCounts,
    QueueRates,
    TaskResult,
    TaskResultStatus,
    validate_timedelta,
)
from threadmill_memory import _leases, _payload
from threadmill_memory._rates import RateHistory
from threadmill_memory._store import Entry, Item, SortKey, Store
from threadmill_memory.live_workers import MemoryLiveWorkers
from threadmill_memory.pauses import MemoryPauses

log = logging.getLogger(__name__)

#: The telemetry's bucket (see `MemoryBackend.rates`).
RATE_BUCKET = timedelta(seconds=1)

READY = TaskResultStatus.READY
DEFERRED = TaskResultStatus.DEFERRED
RUNNING = TaskResultStatus.RUNNING
SUCCESSFUL = TaskResultStatus.SUCCESSFUL
FAILED = TaskResultStatus.FAILED
CANCELLED = TaskResultStatus.CANCELLED


class MemoryBackend(MemoryPauses, MemoryLiveWorkers, Backend):
    """Tasks in this process's memory; thread-safe, gone when the process ends.

    `result_ttl` (positive) is how long terminal tasks stay readable after
    `finished_at`. `close` wakes every `wait_for_tasks` caller and makes later
    waits return at once; the stored tasks stay readable.
    """

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

    def __repr__(self) -> str:
        return f"MemoryBackend(clock={self._clock!r}, result_ttl={self._result_ttl!r})"

    @property
    def result_ttl(self) -> timedelta:
        return self._result_ttl

    def now(self) -> datetime:
        return from_ms(self._now_ms())

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
        )
        return stored, (run_after_ms,) if deferred else self._ready_key(record.priority)

    # --- working ---------------------------------------------------------------------

    def claim(
        self,
        queues: Sequence[str],
        *,
        worker: str,
        lease_ttl: timedelta,
        limit: int = 1,
    ) -> list[Lease]:
        names = queue_names(queues)
        check_limit(limit)
        lease_ms = ttl_ms("lease_ttl", lease_ttl)
        with self._lock:
            now_ms = self._begin()
            self._promote(self._store.up_to(DEFERRED, now_ms, names))
            now, deadline_ms = from_ms(now_ms), now_ms + lease_ms
            leases: list[Lease] = []
            for queue in names:
                while len(leases) < limit and (head := self._store.first(queue, READY)) is not None:
                    record = self._decode_or_quarantine(self._store[head[1]], now_ms)
                    if record is None:
                        continue
                    token, expiries = self._new_token(), self._store[head[1]].unstarted_expiries
                    claimed = attrs.evolve(
                        record,
                        status=RUNNING,
                        attempts=record.attempts + 1,
                        last_attempted_at=now,
                        started_at=record.started_at or now,
                        worker_ids=(*record.worker_ids, worker),
                    )
                    stored = self._put(claimed, (deadline_ms,), token)
                    deadline = from_ms(deadline_ms)
                    leases.append(
                        Lease(
                            token=token,
                            deadline=deadline,
                            record=stored,
                            unstarted_expiries=expiries,
                        )
                    )
            return leases

    def extend(self, lease: Lease, lease_ttl: timedelta) -> Lease | None:
        return self.extend_many([lease], lease_ttl)[0]

    def extend_many(self, leases: Sequence[Lease], lease_ttl: timedelta) -> list[Lease | None]:
        lease_ms = ttl_ms("lease_ttl", lease_ttl)
        with self._lock:
            deadline_ms = self._begin() + lease_ms
            renewed: list[Lease | None] = []
            for lease in leases:
                entry = self._store.get(lease.task_id)
                if entry is None or entry.token != lease.token or entry.status is not RUNNING:
                    renewed.append(None)
                    continue
                self._store.put(attrs.evolve(entry, key=(deadline_ms,)))
                try:
                    record = self._decode(entry)
                except PayloadError:  # poison: the holder's record; the reaper quarantines it
                    record = lease.record
                renewed.append(
                    Lease(token=lease.token, deadline=from_ms(deadline_ms), record=record)
                )
            return renewed

    def complete(self, lease: Lease, record: TaskResult) -> TaskResult | None:
        return self.decide_many([Decision(lease=lease, record=record)])[0]

    def retry(self, lease: Lease, record: TaskResult, delay: timedelta) -> TaskResult | None:
        return self.decide_many([Decision(lease=lease, record=record, retry_delay=delay)])[0]

    def decide_many(self, decisions: Sequence[Decision]) -> list[TaskResult | None]:
        decisions = list(decisions)
        for decision in decisions:  # all arguments are checked before any decision applies
            check_decision(decision)
        with self._lock:
            now_ms = self._begin()
            return [self._decide(decision, now_ms) for decision in decisions]

    def _decide(self, decision: Decision, now_ms: int) -> TaskResult | None:
        entry = self._store.get(decision.lease.task_id)
        if entry is None or entry.token != decision.lease.token:
            return None
        completing = decision.retry_delay is None
        # The states this kind of decision leaves a task in, while its token stays.
        repeat_states = {SUCCESSFUL, FAILED} if completing else {READY, DEFERRED}
        if entry.status in repeat_states:
            return self._decode(entry)  # a repeat after a lost reply: answered as the first time
        if entry.status is not RUNNING:
            return None
        try:
            current = self._decode(entry)
        except PayloadError:  # poison: decided all the same, on the holder's record
            current = decision.lease.record
        errors = tuple(decision.record.errors)
        if decision.retry_delay is None:
            status = decision.record.status
            value = decision.record.return_value if status is SUCCESSFUL else None
            finished = attrs.evolve(
                current,
                status=status,
                errors=errors,
                return_value=value,
                finished_at=from_ms(now_ms),
            )
            stored = self._put(finished, (now_ms,), entry.token)
            self._history.record(entry.queue, now_ms, finished=1)
            return stored
        delay_ms = duration_ms(decision.retry_delay)
        if delay_ms == 0:
            return self._put_ready(attrs.evolve(current, status=READY, errors=errors), entry.token)
        due_ms = now_ms + delay_ms
        later = attrs.evolve(current, status=DEFERRED, errors=errors, run_after=from_ms(due_ms))
        return self._put(later, (due_ms,), entry.token)

    def mark_started(self, leases: Sequence[Lease]) -> list[bool]:
        leases = list(leases)
        with self._lock:
            self._begin()
            return [self._mark_started(lease) for lease in leases]

    def _mark_started(self, lease: Lease) -> bool:
        entry = self._store.get(lease.task_id)
        if (
            entry is None
            or entry.token != lease.token
            or entry.status is not RUNNING
            or entry.reaped
        ):
            return False
        if not entry.started:
            self._store.put(attrs.evolve(entry, started=True))
        return True

    def release(
        self, leases: Sequence[Lease], delay: timedelta = timedelta(0)
    ) -> list[TaskResult | None]:
        leases = list(leases)
        wait_ms = check_delay(delay)
        with self._lock:
            now_ms = self._begin()
            return [self._release(lease, now_ms + wait_ms if wait_ms else None) for lease in leases]

    def _release(self, lease: Lease, due_ms: int | None) -> TaskResult | None:
        entry = self._store.get(lease.task_id)
        if (
            entry is None
            or entry.token != lease.token
            or entry.status is not RUNNING
            or entry.started
            or entry.reaped
        ):
            return None
        return self._give_back(entry, self._decode(entry), entry.unstarted_expiries, due_ms)

    def _give_back(
        self, entry: Entry, current: TaskResult, expiries: int, due_ms: int | None = None
    ) -> TaskResult:
        """Undo the claim `entry` is under: READY tail (DEFERRED till `due_ms` if given),
        attempt and worker undone, no token."""
        attempts = max(current.attempts - 1, 0)
        unclaimed = attrs.evolve(
            current,
            status=READY,
            attempts=attempts,
            worker_ids=current.worker_ids[:-1],
            started_at=current.started_at if attempts else None,
            last_attempted_at=current.last_attempted_at if attempts else None,
        )
        if due_ms is not None:
            later = attrs.evolve(unclaimed, status=DEFERRED, run_after=from_ms(due_ms))
            return self._put(later, (due_ms,), token=None, expiries=expiries)
        return self._put_ready(unclaimed, token=None, expiries=expiries)

    def wait_for_tasks(self, queues: Sequence[str], timeout: timedelta) -> bool:
        """Block until `queues` have a READY (or due DEFERRED) task, `timeout` passed, or `close`.

        Returns at once if such a task is already there. `timeout` is real
        time, whatever the clock: it bounds how long a thread blocks. False
        when it timed out with no such task; True otherwise (closed included).
        """
        names = queue_names(queues)
        with self._ready:
            return self._ready.wait_for(
                lambda: self._closed or self._has_work(names),
                timeout=max(timeout.total_seconds(), 0.0),
            )

    def _has_work(self, queues: list[str]) -> bool:
        now_ms = self._now_ms()
        return any(
            self._store.first(queue, READY) is not None
            or ((due := self._store.first(queue, DEFERRED)) is not None and due[0][0] <= now_ms)
            for queue in queues
        )

    # --- maintenance -----------------------------------------------------------------

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
                    # Never ran: back to READY uncharged, and counted toward the bound.
                    self._give_back(entry, record, entry.unstarted_expiries + 1)
                    given_back = True
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

    # --- inspection ------------------------------------------------------------------

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
                self._decode(entry), status=READY, finished_at=None, return_value=None
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

    def purge(self, queue: str, status: TaskResultStatus) -> int:
        status = check_purgeable(status)
        with self._lock:
            self._begin()
            return self._store.purge(queue, status)

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

    # --- internals (called with the lock held) ---------------------------------------

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
