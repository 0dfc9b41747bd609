"""The memory backend's worker side: claiming, leases, decisions, starts, give-backs, waits."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import attrs

from threadmill_core.checks import (
    check_decision,
    check_delay,
    check_limit,
    check_progress_updates,
    queue_names,
    ttl_ms,
)
from threadmill_core.clock import duration_ms, from_ms
from threadmill_core.errors import PayloadError
from threadmill_core.models import Decision, Lease, Progress, TaskResult, TaskResultStatus
from threadmill_memory._state import MemoryState

READY = TaskResultStatus.READY
DEFERRED = TaskResultStatus.DEFERRED
RUNNING = TaskResultStatus.RUNNING
SUCCESSFUL = TaskResultStatus.SUCCESSFUL
FAILED = TaskResultStatus.FAILED
CANCELLED = TaskResultStatus.CANCELLED


class MemoryWorking(MemoryState):
    """`claim`, `extend`, the decisions, `mark_started`, `record_progress`, `release` and
    `wait_for_tasks`."""

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
                    Lease(
                        token=lease.token,
                        deadline=from_ms(deadline_ms),
                        record=record,
                        cancel_requested=record.cancel_requested_at is not None,
                    )
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
        # The states this kind of decision leaves a task in, while its token stays
        # (a retry of a task with a cancel request finalizes it CANCELLED).
        repeat_states = (
            {SUCCESSFUL, FAILED, CANCELLED} if completing else {READY, DEFERRED, CANCELLED}
        )
        if entry.status in repeat_states:
            return self._decode(entry)  # a repeat after a lost reply: answered as the first time
        if entry.status is not RUNNING:
            return None
        try:
            current = self._decode(entry)
        except PayloadError:  # poison: decided all the same, on the holder's record
            current = decision.lease.record
        errors = tuple(decision.record.errors)
        if not completing and current.cancel_requested_at is not None:
            return self._finalize_cancelled(
                attrs.evolve(current, errors=errors), now_ms, entry.token
            )
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

    def record_progress(self, updates: Sequence[tuple[Lease, Progress]]) -> list[bool]:
        checked = check_progress_updates(updates)
        with self._lock:
            now = from_ms(self._begin())
            return [self._record_progress(lease, progress, now) for lease, progress in checked]

    def _record_progress(self, lease: Lease, progress: Progress, now: datetime) -> bool:
        entry = self._store.get(lease.task_id)
        if entry is None or entry.token != lease.token or entry.status is not RUNNING:
            return False
        try:
            current = self._decode(entry)
        except PayloadError:  # poison: nothing to write it on; the reaper quarantines it
            return False
        self._rewrite(entry, attrs.evolve(current, progress=attrs.evolve(progress, updated_at=now)))
        return True

    def release(
        self, leases: Sequence[Lease], delay: timedelta = timedelta(0)
    ) -> list[TaskResult | None]:
        leases = list(leases)
        wait_ms = check_delay(delay)
        with self._lock:
            now_ms = self._begin()
            due_ms = now_ms + wait_ms if wait_ms else None
            return [self._release(lease, now_ms, due_ms) for lease in leases]

    def _release(self, lease: Lease, now_ms: int, due_ms: int | None) -> TaskResult | None:
        entry = self._store.get(lease.task_id)
        if (
            entry is None
            or entry.token != lease.token
            or entry.status is not RUNNING
            or entry.started
            or entry.reaped
        ):
            return None
        try:
            current = self._decode(entry)
        except PayloadError:  # poison: refused, not given back; the reaper quarantines it
            return None
        return self._give_back(entry, current, entry.unstarted_expiries, now_ms, due_ms)

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
