"""The model's state (`ModelState`): its clock, tasks, leases, segments and shared steps.

The steps every job takes (promoting, leasing, giving back, clearing a
token) are here, so the operations in `.working`, `.upkeep` and
`threadmill_core.testing.model` read as the protocol's rules and nothing else.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from threadmill_core.models import TaskResult, TaskResultStatus
from threadmill_core.testing._model.records import (
    CANCELLED,
    DEFERRED,
    READY,
    RUNNING,
    ExpectedLease,
    GroupKey,
    LeaseInfo,
    ModelTask,
    stamp,
)


class ModelState:
    """Every task in a plain dict, every lease serial the model made, and the model's clock."""

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms
        self.tasks: dict[str, ModelTask] = {}
        self.leases: dict[int, LeaseInfo] = {}
        self._serials = itertools.count(1)
        self._ready_seq = itertools.count(1)
        self._incarnations: dict[str, int] = {}

    # --- clock -----------------------------------------------------------------------

    def advance(self, ms: int) -> None:
        """Move the model's clock forward by `ms` milliseconds."""
        if ms < 0:
            raise ValueError(f"the model's clock only moves forward, got {ms} ms")
        self.now_ms += ms

    # --- records ---------------------------------------------------------------------

    def record(self, task: ModelTask) -> TaskResult:
        """The record a backend must store for `task`."""
        return TaskResult(
            id=task.id,
            task_path=task.task_path,
            args=task.args,
            kwargs=task.kwargs,
            queue=task.queue,
            priority=task.priority,
            status=task.status,
            enqueued_at=stamp(task.enqueued_at),
            run_after=stamp(task.run_after),
            started_at=stamp(task.started_at),
            last_attempted_at=stamp(task.last_attempted_at),
            finished_at=stamp(task.finished_at),
            attempts=task.attempts,
            errors=tuple(task.errors),
            worker_ids=tuple(task.worker_ids),
            return_value=task.return_value,
            retry=task.retry,
            headers=task.headers,
            time_limit=task.time_limit,
            progress=task.progress,
            cancel_requested_at=stamp(task.cancel_requested_at),
        )

    def group_key(self, task: ModelTask) -> GroupKey:
        """The task's place in its segment, without the final tie-break on id."""
        if task.status is READY:
            return (-task.priority, task.ready_seq)
        if task.status is DEFERRED:
            assert task.run_after is not None
            return (task.run_after,)
        if task.status is RUNNING:
            assert task.deadline is not None
            return (task.deadline,)
        assert task.finished_at is not None
        return (task.finished_at,)

    def _sorted(self, tasks: Iterable[ModelTask]) -> list[ModelTask]:
        return sorted(tasks, key=lambda task: (self.group_key(task), task.id))

    def segment(self, queue: str, status: TaskResultStatus) -> list[tuple[GroupKey, TaskResult]]:
        """Every record of one segment in segment order, each with its group key."""
        members = [t for t in self.tasks.values() if t.queue == queue and t.status is status]
        return [(self.group_key(t), self.record(t)) for t in self._sorted(members)]

    # --- shared steps ----------------------------------------------------------------

    def _promote(self, tasks: Iterable[ModelTask]) -> None:
        """Move DEFERRED tasks to READY in DEFERRED order; equal `run_after`s share a place."""
        by_time = itertools.groupby(self._sorted(tasks), key=lambda t: t.run_after)
        for _, tied in by_time:
            seq = next(self._ready_seq)
            for task in tied:
                task.status = READY
                task.ready_seq = seq

    def _due(self, task: ModelTask) -> bool:
        return (
            task.status is DEFERRED and task.run_after is not None and task.run_after <= self.now_ms
        )

    def _new_lease(self, task: ModelTask, kind: str, deadline_ms: int) -> ExpectedLease:
        serial = next(self._serials)
        self.leases[serial] = LeaseInfo(serial, task.id, kind, task.incarnation)
        task.holder = serial
        task.token_history.append(serial)
        task.deadline = deadline_ms
        task.started = False
        expiries = task.unstarted_expiries if kind == "worker" else 0
        return ExpectedLease(serial, deadline_ms, self.record(task), expiries)

    def _give_back(self, task: ModelTask, ready_seq: int, action: str) -> None:
        """Undo `task`'s current claim: READY at `ready_seq`, one attempt fewer, token cleared.

        A task with a cancel request is finalized CANCELLED instead, its claim undone all the same.
        """
        self._unclaim(task)
        if task.cancel_requested_at is not None:
            self._finalize_cancelled(task)
        else:
            task.status = READY
            task.ready_seq = ready_seq
        self._clear_token(task, action)

    def _unclaim(self, task: ModelTask) -> None:
        """Undo `task`'s current claim: one attempt fewer, its worker dropped."""
        task.deadline = None
        task.attempts = max(task.attempts - 1, 0)
        task.worker_ids = task.worker_ids[:-1]
        if task.attempts == 0:
            task.started_at = None
            task.last_attempted_at = None

    def _finalize_cancelled(self, task: ModelTask) -> None:
        """CANCELLED as of now, instead of going back (the task has a cancel request)."""
        task.status = CANCELLED
        task.finished_at = self.now_ms
        task.deadline = None

    def _clear_token(self, task: ModelTask, action: str) -> None:
        task.holder = None
        task.started = False
        task.token_history.append(action)
