"""A deliberately naive model of the storage protocol: the conformance kit's oracle.

`ProtocolModel` keeps every task in a plain dict and recomputes each segment
by sorting, so that it is obviously right rather than fast. It shares no code
with any backend (in particular none with `threadmill_memory`, which is under
test like every other backend). Each operation mirrors one `Backend` method
and predicts its answer and its effect; the state machine in
`threadmill_core.testing.machine` runs both side by side.

Time. The model has its own clock, integer milliseconds since the epoch,
that moves only through `advance`. The machine keeps it in step with the
harness.

Tokens. The model cannot predict token strings, so it never sees them. Each
claim (worker or reaper) creates a lease *serial*; a task remembers the
serial that holds its current token (`holder`) and the history of claims and
token-clearing actions, so a refusal can be explained ("a reaper claim
replaced it"). The machine pairs each serial with the `Lease` the backend
returned, and checks token freshness itself.

Cancel requests and progress. `request_cancel` stamps a RUNNING task once
(`cancel_requested_at`); `extend` then says so on the renewed lease. A task
with a request never goes back: `retry` (token kept), `release` and
`claim_expired` (claim undone if unstarted, token cleared) finalize it
CANCELLED. `record_progress` is fenced like `extend` and stamps the progress
with the model's clock. `requeue` clears both.

Starts. A task remembers whether its current claim's start was recorded
(`started`, reset by every new lease and every cleared token) and how many
times an unstarted claim of it expired and was given back
(`unstarted_expiries`, which nothing resets, and which every later worker
claim's lease shows). `claim_expired` gives back the expired tasks whose
current lease is an unstarted worker claim, exactly as `release` does, and
claims the rest.

Decisions. `complete` and `retry` act while the lease holds the current
token and the task is RUNNING. With the current token on a task already in
the state that kind of decision leaves (terminal for `complete`, READY or
DEFERRED, or CANCELLED, for `retry`) the call is a repeat after a lost reply: it changes
nothing and answers the stored record. `requeue` and `cancel` clear the
token. A reaper claim takes the token but leaves the record alone (it is
not an attempt).

Ties. Where the protocol orders by a time, two tasks can share the time;
the protocol then orders by id. Every segment entry therefore has a *group
key* (the order without the id) and an exact key (the group key, then the
id). A backend whose clock the kit does not control (`Harness.exact_clock`
False) stamps two calls made at one model instant with slightly different
times, so there the machine accepts any order inside a group, and operations
that pick tasks by order take a `Chooser` that says which of the candidates
the backend actually took.

Values. Python's ``==`` is too lenient to judge a payload's round trip
(``1 == True``, ``0.0 == -0.0``, ``{"a": 1, "b": 2} == {"b": 2, "a": 1}``)
and too strict for ``nan``; `same_value` is the equality the kit judges
values by.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from threadmill_core.clock import duration_ms, to_ms
from threadmill_core.models import QueueCounts, TaskResult, TaskResultStatus
from threadmill_core.testing._model.records import (
    APPLIED,
    CANCELLED,
    DEFERRED,
    FAILED,
    GIVE_BACK,
    READY,
    REPEAT,
    RUNNING,
    SUCCESSFUL,
    Candidate,
    Chooser,
    ExpectedLease,
    GroupKey,
    LeaseInfo,
    ModelTask,
    Outcome,
    Settler,
    stamp,
    take_first,
)
from threadmill_core.testing._model.upkeep import UpkeepModel
from threadmill_core.testing._model.working import WorkingModel

__all__ = [
    "APPLIED",
    "CANCELLED",
    "DEFERRED",
    "FAILED",
    "GIVE_BACK",
    "READY",
    "REPEAT",
    "RUNNING",
    "SUCCESSFUL",
    "Candidate",
    "Chooser",
    "ExpectedLease",
    "GroupKey",
    "LeaseInfo",
    "ModelTask",
    "Outcome",
    "ProtocolModel",
    "ProtocolViolation",
    "Settler",
    "same_value",
    "stamp",
    "take_first",
]


class ProtocolViolation(AssertionError):
    """A backend disagrees with the protocol; the message's first line names the rule broken."""


def same_value(expected: Any, got: Any) -> bool:
    """Whether `got` is `expected` value for value, as the codec promises.

    Types must match exactly (``True`` is not ``1``, ``1.0`` is not ``1``),
    floats bit for bit except that any ``nan`` equals any ``nan`` (``-0.0``
    is not ``0.0``), and dict keys must come in the same order.
    """
    if type(expected) is not type(got):
        return False
    if isinstance(expected, float):
        if math.isnan(expected):
            return math.isnan(got)
        return bool(expected == got and math.copysign(1.0, expected) == math.copysign(1.0, got))
    if isinstance(expected, list):
        return len(expected) == len(got) and all(
            same_value(e, g) for e, g in zip(expected, got, strict=True)
        )
    if isinstance(expected, dict):
        return list(expected) == list(got) and all(
            same_value(value, got[key]) for key, value in expected.items()
        )
    return bool(expected == got)


class ProtocolModel(WorkingModel, UpkeepModel):
    """The protocol of `threadmill_core.backend.Backend`, modelled with plain dicts.

    Operations that the protocol refuses with a `ValueError` (bad limits,
    statuses, delays) are not modelled: the machine never makes them, and the
    bad-input scenarios check them directly.

    Producing, inspection and operator actions are here; the worker's
    operations come from `_model.working`, the reaper's and the promoter's
    from `_model.upkeep`, the state and the steps they share from `_model.state`.
    """

    # --- producing -------------------------------------------------------------------

    def enqueue(self, records: Sequence[TaskResult]) -> list[TaskResult]:
        """Store new ids (DEFERRED if `run_after` is in the future, else READY); return stored."""
        stored = []
        for given in records:
            task = self.tasks.get(given.id)
            if task is None:
                run_after = None if given.run_after is None else to_ms(given.run_after)
                deferred = run_after is not None and run_after > self.now_ms
                incarnation = self._incarnations.get(given.id, 0) + 1
                self._incarnations[given.id] = incarnation
                task = ModelTask(
                    id=given.id,
                    task_path=given.task_path,
                    args=given.args,
                    kwargs=given.kwargs,
                    queue=given.queue,
                    priority=given.priority,
                    retry=given.retry,
                    headers=dict(given.headers),
                    time_limit=(
                        None
                        if given.time_limit is None
                        else timedelta(milliseconds=duration_ms(given.time_limit))
                    ),
                    status=DEFERRED if deferred else READY,
                    enqueued_at=self.now_ms,
                    run_after=run_after,
                    incarnation=incarnation,
                )
                if not deferred:
                    task.ready_seq = next(self._ready_seq)
                self.tasks[given.id] = task
            stored.append(self.record(task))
        return stored

    # --- inspection ------------------------------------------------------------------

    def get(self, task_id: str) -> TaskResult | None:
        """The stored record, or None for an unknown (or purged) id."""
        task = self.tasks.get(task_id)
        return None if task is None else self.record(task)

    def peek(
        self, queue: str, status: TaskResultStatus, *, offset: int, limit: int
    ) -> list[tuple[GroupKey, TaskResult]]:
        """A page of one segment, in segment order."""
        return self.segment(queue, status)[offset : offset + limit]

    def counts(self) -> dict[str, QueueCounts]:
        """Per-queue counts, for queues holding at least one task."""
        tallies: dict[str, dict[str, int]] = {}
        for task in self.tasks.values():
            tally = tallies.setdefault(task.queue, {})
            name = task.status.value.lower()
            tally[name] = tally.get(name, 0) + 1
        return {queue: QueueCounts(queue=queue, **tally) for queue, tally in tallies.items()}

    # --- operator actions ------------------------------------------------------------

    def requeue(self, task_id: str) -> Outcome:
        """FAILED or CANCELLED back to the READY tail, token cleared; anything else refused."""
        task = self.tasks.get(task_id)
        if task is None:
            return Outcome(None, "an unknown id")
        if task.status not in (FAILED, CANCELLED):
            return Outcome(None, f"a {task.status.value} task")
        task.status = READY
        task.ready_seq = next(self._ready_seq)
        task.finished_at = None
        task.return_value = None
        task.progress = None
        task.cancel_requested_at = None
        self._clear_token(task, "requeue()")
        return Outcome(self.record(task), APPLIED)

    def cancel(self, task_id: str) -> Outcome:
        """READY or DEFERRED to CANCELLED, token cleared; anything else refused."""
        task = self.tasks.get(task_id)
        if task is None:
            return Outcome(None, "an unknown id")
        if task.status not in (READY, DEFERRED):
            return Outcome(None, f"a {task.status.value} task")
        task.status = CANCELLED
        task.finished_at = self.now_ms
        self._clear_token(task, "cancel()")
        return Outcome(self.record(task), APPLIED)

    def request_cancel(self, task_id: str) -> Outcome:
        """Stamp a RUNNING task's cancel request (the first wins); anything else refused."""
        task = self.tasks.get(task_id)
        if task is None:
            return Outcome(None, "an unknown id")
        if task.status is not RUNNING:
            return Outcome(None, f"a {task.status.value} task")
        if task.cancel_requested_at is not None:
            return Outcome(self.record(task), REPEAT)
        task.cancel_requested_at = self.now_ms
        return Outcome(self.record(task), APPLIED)

    def purge(self, queue: str, status: TaskResultStatus) -> int:
        """Delete one segment (never RUNNING); return how many tasks went."""
        if status is RUNNING:
            raise ValueError("RUNNING cannot be purged")
        doomed = [t.id for t in self.tasks.values() if t.queue == queue and t.status is status]
        for task_id in doomed:
            del self.tasks[task_id]
        return len(doomed)
