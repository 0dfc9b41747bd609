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
DEFERRED for `retry`) the call is a repeat after a lost reply: it changes
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

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from threadmill_core.clock import from_ms, to_ms
from threadmill_core.models import (
    JSON,
    TERMINAL_STATUSES,
    QueueCounts,
    RetryPolicySpec,
    TaskError,
    TaskResult,
    TaskResultStatus,
)

READY = TaskResultStatus.READY
DEFERRED = TaskResultStatus.DEFERRED
RUNNING = TaskResultStatus.RUNNING
SUCCESSFUL = TaskResultStatus.SUCCESSFUL
FAILED = TaskResultStatus.FAILED
CANCELLED = TaskResultStatus.CANCELLED

#: A segment order without its final tie-break on id.
GroupKey = tuple[int, ...]
#: A task the operation could take, as (group key, id); lists of them are in exact order.
Candidate = tuple[GroupKey, str]
#: Picks which candidates an operation takes: given all candidates in exact
#: order and the limit, returns the ids taken, best first.
Chooser = Callable[[list[Candidate], int], list[str]]
#: Settles which of some tied candidates an operation reached (see
#: `ProtocolModel.claim_expired`): given their ids, returns those it reached.
Settler = Callable[[list[str]], list[str]]


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


def stamp(ms: int | None) -> datetime | None:
    """Epoch milliseconds as the aware datetime a backend stores (None stays None)."""
    return None if ms is None else from_ms(ms)


def take_first(candidates: list[Candidate], limit: int) -> list[str]:
    """The default `Chooser`: the first `limit` candidates in exact order."""
    return [task_id for _, task_id in candidates[:limit]]


@dataclass
class ModelTask:
    """One task as the model stores it; times are epoch milliseconds."""

    id: str
    task_path: str
    args: list[JSON]
    kwargs: dict[str, JSON]
    queue: str
    priority: int
    retry: RetryPolicySpec | None
    status: TaskResultStatus
    enqueued_at: int
    run_after: int | None
    #: Which enqueue of this id this is (a purged id may be enqueued again).
    incarnation: int
    started_at: int | None = None
    last_attempted_at: int | None = None
    finished_at: int | None = None
    attempts: int = 0
    errors: list[TaskError] = field(default_factory=list)
    worker_ids: list[str] = field(default_factory=list)
    return_value: JSON = None
    #: Position in the backend-wide "entered READY" sequence. Tasks promoted
    #: in one batch with the same `run_after` share a number (they are tied,
    #: and then ordered by id).
    ready_seq: int = 0
    #: Lease deadline while RUNNING.
    deadline: int | None = None
    #: Serial of the lease whose token is current, or None (never claimed, or cleared).
    holder: int | None = None
    #: Lease serials and token-clearing actions ("requeue()", "cancel()"), in order.
    token_history: list[int | str] = field(default_factory=list)
    #: Whether the current claim's start was recorded (`mark_started`).
    started: bool = False
    #: How many expired unstarted claims `claim_expired` gave back, in the task's life.
    unstarted_expiries: int = 0


@dataclass(frozen=True)
class LeaseInfo:
    """What the model knows of one lease serial."""

    serial: int
    task_id: str
    #: "worker" (from `claim`), "reaper" (from `claim_expired`) or "forged" (never issued).
    kind: str
    incarnation: int


@dataclass(frozen=True)
class ExpectedLease:
    """A lease the backend should have returned: its serial, deadline and record."""

    serial: int
    deadline_ms: int
    record: TaskResult
    #: The task's give-backs as the claim found them (0 for a reaper's lease).
    unstarted_expiries: int = 0

    @property
    def task_id(self) -> str:
        return self.record.id


@dataclass(frozen=True)
class Outcome:
    """The predicted answer of a fenced operation, and why.

    `record` is None when the operation must be refused. `verdict` says why, as
    a phrase that completes "accepted ..." or "refused ...": for example
    "a stale token (a reaper claim replaced it)" or "a repeat after a lost reply".
    """

    record: TaskResult | None
    verdict: str
    lease: ExpectedLease | None = None

    @property
    def refused(self) -> bool:
        return self.record is None


APPLIED = "a current token"
REPEAT = "a repeat after a lost reply"
#: The token-clearing action of `claim_expired` giving back an unstarted claim.
GIVE_BACK = "claim_expired() giving back its unstarted claim"


class ProtocolModel:
    """The protocol of `threadmill_core.backend.Backend`, modelled with plain dicts.

    Operations that the protocol refuses with a `ValueError` (bad limits,
    statuses, delays) are not modelled: the machine never makes them, and the
    bad-input scenarios check them directly.
    """

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

    # --- working ---------------------------------------------------------------------

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
        return Outcome(record, APPLIED, ExpectedLease(serial, task.deadline, record))

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
        if task.status in (READY, DEFERRED):
            return Outcome(self.record(task), REPEAT)
        if task.status is not RUNNING:
            return Outcome(
                None, f"a lease whose complete() already finalized the task ({task.status.value})"
            )
        task.errors = list(errors)
        task.deadline = None
        if delay_ms == 0:
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
        if delay_ms > 0:
            task.status = DEFERRED
            task.run_after = self.now_ms + delay_ms
        return Outcome(self.record(task), APPLIED)

    def _give_back(self, task: ModelTask, ready_seq: int, action: str) -> None:
        """Undo `task`'s current claim: READY at `ready_seq`, one attempt fewer, token cleared."""
        task.status = READY
        task.ready_seq = ready_seq
        task.deadline = None
        task.attempts = max(task.attempts - 1, 0)
        task.worker_ids = task.worker_ids[:-1]
        if task.attempts == 0:
            task.started_at = None
            task.last_attempted_at = None
        self._clear_token(task, action)

    # --- maintenance -----------------------------------------------------------------

    def expired(self) -> list[Candidate]:
        """RUNNING tasks whose lease deadline is at or before now, oldest (then id) first."""
        late = [
            t
            for t in self.tasks.values()
            if t.status is RUNNING and t.deadline is not None and t.deadline <= self.now_ms
        ]
        return [(self.group_key(t), t.id) for t in self._sorted(late)]

    def unstarted(self, task_id: str) -> bool:
        """Whether an expiry of the task's current claim would be given back uncharged."""
        task = self.tasks[task_id]
        return (
            task.holder is not None
            and self.leases[task.holder].kind == "worker"
            and not task.started
        )

    def claim_expired(
        self,
        *,
        limit: int,
        claim_ttl_ms: int,
        choose: Chooser = take_first,
        settle: Settler | None = None,
    ) -> list[ExpectedLease]:
        """The reaper's pass: give back the expired unstarted claims it meets, and make a
        fresh reaper lease on up to `limit` of the other expired tasks (not an attempt).

        `choose` picks the claimed tasks among the charged candidates. The
        pass stops at its `limit`-th claim, so an unstarted task after that
        one stays as it is. Where that last claim is tied (same deadline)
        with unstarted tasks, `settle` says which of those the pass reached
        (default: those before it by id, as on an exact clock). Tasks given
        back with one deadline enter READY together: tied, then by id.
        """
        expired = self.expired()
        unstarted = [c for c in expired if self.unstarted(c[1])]
        charged = [c for c in expired if not self.unstarted(c[1])]
        claimed = choose(charged, limit)
        back = [task_id for _, task_id in unstarted]
        if len(claimed) >= limit and claimed:
            last_key = next(key for key, task_id in charged if task_id == claimed[-1])
            back = [task_id for key, task_id in unstarted if key < last_key]
            tied = [task_id for key, task_id in unstarted if key == last_key]
            if settle is not None:
                back += settle(tied)
            else:
                back += [task_id for task_id in tied if task_id < claimed[-1]]
        given = [self.tasks[task_id] for task_id in back]
        for _, tied_tasks in itertools.groupby(
            sorted(given, key=lambda t: (t.deadline or 0, t.id)), key=lambda t: t.deadline
        ):
            seq = next(self._ready_seq)
            for task in tied_tasks:
                task.unstarted_expiries += 1
                self._give_back(task, seq, GIVE_BACK)
        return [
            self._new_lease(self.tasks[task_id], "reaper", self.now_ms + claim_ttl_ms)
            for task_id in claimed
        ]

    def expire_leases(self, worker: str) -> list[str]:
        """Deadline now for every live lease of a worker claim by `worker`; the ids, by id."""
        cut = sorted(
            t.id
            for t in self.tasks.values()
            if t.status is RUNNING
            and t.holder is not None
            and self.leases[t.holder].kind == "worker"
            and t.worker_ids[-1:] == [worker]
            and t.deadline is not None
            and t.deadline > self.now_ms
        )
        for task_id in cut:
            self.tasks[task_id].deadline = self.now_ms
        return cut

    def due(self) -> list[Candidate]:
        """Due DEFERRED tasks of every queue, in DEFERRED order (run_after, then id)."""
        due = [t for t in self.tasks.values() if self._due(t)]
        return [(self.group_key(t), t.id) for t in self._sorted(due)]

    def promote_due(self, *, limit: int, choose: Chooser = take_first) -> int:
        """Promote up to `limit` due DEFERRED tasks to READY, in DEFERRED order; return how many."""
        chosen = choose(self.due(), limit)
        self._promote(self.tasks[task_id] for task_id in chosen)
        return len(chosen)

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

    def _clear_token(self, task: ModelTask, action: str) -> None:
        task.holder = None
        task.started = False
        task.token_history.append(action)

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

    def purge(self, queue: str, status: TaskResultStatus) -> int:
        """Delete one segment (never RUNNING); return how many tasks went."""
        if status is RUNNING:
            raise ValueError("RUNNING cannot be purged")
        doomed = [t.id for t in self.tasks.values() if t.queue == queue and t.status is status]
        for task_id in doomed:
            del self.tasks[task_id]
        return len(doomed)
