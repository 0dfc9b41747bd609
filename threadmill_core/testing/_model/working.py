"""The model's worker side: claims, fencing, renewals, decisions, starts and releases."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from threadmill_core.models import JSON, TERMINAL_STATUSES, Progress, TaskError, TaskResultStatus
from threadmill_core.testing._model.records import (
    APPLIED,
    CANCELLED,
    DEFERRED,
    READY,
    REPEAT,
    RUNNING,
    SUCCESSFUL,
    Candidate,
    Chooser,
    ExpectedLease,
    LeaseInfo,
    Outcome,
    stamp,
    take_first,
)
from threadmill_core.testing._model.state import ModelState


class WorkingModel(ModelState):
    """`claim`, `extend`, `complete`, `retry`, `mark_started`, `record_progress` and
    `release`, each fenced by `refusal`; `forge` makes the leases a backend never issued."""

    def claim(
        self,
        queues: Sequence[str],
        *,
        worker: str,
        lease_ttl_ms: int,
        limit: int,
        choose: Chooser = take_first,
    ) -> list[ExpectedLease]:
        """Promote the due tasks of `queues`, then lease up to `limit` READY tasks, best first."""
        wanted = list(dict.fromkeys(queues))
        self._promote(t for t in self.tasks.values() if t.queue in wanted and self._due(t))
        candidates: list[Candidate] = []
        for index, queue in enumerate(wanted):
            for key, record in self.segment(queue, READY):
                candidates.append(((index, *key), record.id))
        leases = []
        for task_id in choose(candidates, limit):
            task = self.tasks[task_id]
            task.status = RUNNING
            task.attempts += 1
            task.last_attempted_at = self.now_ms
            if task.started_at is None:
                task.started_at = self.now_ms
            task.worker_ids.append(worker)
            leases.append(self._new_lease(task, "worker", self.now_ms + lease_ttl_ms))
        return leases

    def forge(self, task_id: str) -> int:
        """Register a lease the backend never issued (a made-up token); return its serial."""
        serial = next(self._serials)
        incarnation = self._incarnations.get(task_id, 0)
        self.leases[serial] = LeaseInfo(serial, task_id, "forged", incarnation)
        return serial

    def refusal(self, serial: int) -> str | None:
        """Why a state change with lease `serial` must be refused on fencing grounds, or None.

        Only the token is judged here; whether the task's status allows the
        operation is each operation's own business.
        """
        info = self.leases[serial]
        task = self.tasks.get(info.task_id)
        if info.kind == "forged":
            return "a token it never issued"
        if task is None:
            return "a lease on a task that no longer exists (purged)"
        if task.incarnation != info.incarnation:
            return "a lease from before the task was purged and enqueued again"
        if task.holder == serial:
            return None
        history = task.token_history
        replaced_by = history[history.index(serial) + 1]
        if isinstance(replaced_by, str):
            return f"a token that {replaced_by} cleared"
        if self.leases[replaced_by].kind == "reaper":
            return "a stale token (a reaper claim replaced it)"
        return "a stale token (a later claim replaced it)"

    def extend(self, serial: int, *, lease_ttl_ms: int) -> Outcome:
        """Renew lease `serial` (deadline now + ttl); refused unless current and RUNNING."""
        refusal = self.refusal(serial)
        if refusal is not None:
            return Outcome(None, refusal)
        task = self.tasks[self.leases[serial].task_id]
        if task.status is not RUNNING:
            return Outcome(None, f"a lease on a task that is {task.status.value}, not RUNNING")
        task.deadline = self.now_ms + lease_ttl_ms
        record = self.record(task)
        cancel_requested = task.cancel_requested_at is not None
        lease = ExpectedLease(serial, task.deadline, record, cancel_requested=cancel_requested)
        return Outcome(record, APPLIED, lease)

    def complete(
        self,
        serial: int,
        *,
        status: TaskResultStatus,
        errors: Sequence[TaskError],
        return_value: JSON,
    ) -> Outcome:
        """Finalize a RUNNING task, or answer a repeat with the stored record; else refuse."""
        refusal = self.refusal(serial)
        if refusal is not None:
            return Outcome(None, refusal)
        task = self.tasks[self.leases[serial].task_id]
        if task.status in TERMINAL_STATUSES:
            return Outcome(self.record(task), REPEAT)
        if task.status is not RUNNING:
            return Outcome(
                None, f"a lease whose retry() already sent the task back ({task.status.value})"
            )
        task.status = status
        task.errors = list(errors)
        task.return_value = return_value if status is SUCCESSFUL else None
        task.finished_at = self.now_ms
        task.deadline = None
        return Outcome(self.record(task), APPLIED)

    def retry(self, serial: int, *, errors: Sequence[TaskError], delay_ms: int) -> Outcome:
        """Send a RUNNING task back (READY tail or DEFERRED), or answer a repeat; else refuse."""
        refusal = self.refusal(serial)
        if refusal is not None:
            return Outcome(None, refusal)
        task = self.tasks[self.leases[serial].task_id]
        if task.status in (READY, DEFERRED, CANCELLED):
            return Outcome(self.record(task), REPEAT)
        if task.status is not RUNNING:
            return Outcome(
                None, f"a lease whose complete() already finalized the task ({task.status.value})"
            )
        task.errors = list(errors)
        task.deadline = None
        if task.cancel_requested_at is not None:  # it never goes back: CANCELLED, token kept
            self._finalize_cancelled(task)
        elif delay_ms == 0:
            task.status = READY
            task.ready_seq = next(self._ready_seq)
        else:
            task.status = DEFERRED
            task.run_after = self.now_ms + delay_ms
        return Outcome(self.record(task), APPLIED)

    def mark_started(self, serial: int) -> Outcome:
        """Record that lease `serial`'s claim began to run; refused unless a current worker
        claim on a RUNNING task. The record is unchanged (the answer carries it)."""
        refusal = self.refusal(serial)
        if refusal is not None:
            return Outcome(None, refusal)
        task = self.tasks[self.leases[serial].task_id]
        if task.status is not RUNNING:
            return Outcome(None, f"a lease on a task that is {task.status.value}, not RUNNING")
        if self.leases[serial].kind == "reaper":
            return Outcome(None, "a reaper's lease (a reaper claim is decided, never marked)")
        verdict = REPEAT if task.started else APPLIED
        task.started = True
        return Outcome(self.record(task), verdict)

    def release(self, serial: int, delay_ms: int = 0) -> Outcome:
        """Give back a claimed task that never started: READY tail (DEFERRED, due in
        `delay_ms`, when that is above zero), the claim's attempt undone, token cleared."""
        refusal = self.refusal(serial)
        if refusal is not None:
            return Outcome(None, refusal)
        task = self.tasks[self.leases[serial].task_id]
        if task.status is not RUNNING:
            return Outcome(None, f"a lease on a task that is {task.status.value}, not RUNNING")
        if self.leases[serial].kind == "reaper":
            return Outcome(None, "a reaper's lease (a reaper claim is decided, never released)")
        if task.started:
            return Outcome(
                None, "a lease whose start was recorded (a started task is not given back)"
            )
        self._give_back(task, next(self._ready_seq), "release()")
        if delay_ms > 0 and task.status is READY:
            task.status = DEFERRED
            task.run_after = self.now_ms + delay_ms
        return Outcome(self.record(task), APPLIED)

    def record_progress(self, serial: int, progress: Progress) -> Outcome:
        """Store `progress` (stamped now) on lease `serial`'s task; refused unless the token
        is current and the task RUNNING. The answer carries the record as stored."""
        refusal = self.refusal(serial)
        if refusal is not None:
            return Outcome(None, refusal)
        task = self.tasks[self.leases[serial].task_id]
        if task.status is not RUNNING:
            return Outcome(None, f"a lease on a task that is {task.status.value}, not RUNNING")
        task.progress = attrs.evolve(progress, updated_at=stamp(self.now_ms))
        return Outcome(self.record(task), APPLIED)
