"""Acting on tasks: `requeue`, `requeue_failed` and `cancel`, each reported as a `Report`.

They go through the storage interface's fenced operations one task at a
time, so an operator can never resurrect a task that is running or
finished: a task that changed between the operator's look and the action
is refused by the backend, and the `Outcome` says why, from a fresh read of
the task. Nothing here decides on a stale read; the reads only explain.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import attrs

from threadmill_core.broker import Broker
from threadmill_core.cli.exit_codes import ExitCode
from threadmill_core.cli.inspector.lookup import search
from threadmill_core.cli.inspector.queries import (
    DEFERRED,
    FAILED,
    READY,
    RUNNING,
    SUCCESSFUL,
    Listed,
    Undecodable,
    list_tasks,
)
from threadmill_core.errors import PayloadError
from threadmill_core.models import TaskResult, TaskResultStatus

#: How many FAILED records `requeue_failed` reads at a time.
PAGE_SIZE = 100


@attrs.frozen(kw_only=True)
class Outcome:
    """What one action did to one task."""

    task_id: str
    done: bool
    #: The stored record after the action, when done.
    record: TaskResult | None = None
    #: The task's status when refused, as read just after the refusal (None: unknown or poison).
    status: TaskResultStatus | None = None
    #: Why it was refused; empty when done.
    reason: str = ""


@attrs.frozen(kw_only=True)
class Report:
    """The outcomes of one command's action, in the order the tasks were asked for."""

    action: str
    outcomes: tuple[Outcome, ...]

    @property
    def done(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.done]

    @property
    def refused(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.done]

    @property
    def exit_code(self) -> ExitCode:
        if not self.refused:
            return ExitCode.DONE
        return ExitCode.PARTLY_DONE if self.done else ExitCode.NOTHING_DONE


_UNKNOWN = "no such task (never enqueued, purged, or its result expired)"


def _poison(exc: PayloadError) -> str:
    return f"its stored bytes do not decode ({exc}); purge its segment to remove it"


def _why_not_requeued(status: TaskResultStatus) -> str:
    if status is RUNNING:
        return (
            "it is RUNNING: its lease holder (a worker or the reaper) decides it, not an operator"
        )
    if status is SUCCESSFUL:
        return "it finished SUCCESSFUL: a successful task is never run again"
    if status in (READY, DEFERRED):
        return f"it is {status.value}: already waiting to run"
    return f"it changed meanwhile and is {status.value} now: look again and retry"


def _why_not_cancelled(status: TaskResultStatus) -> str:
    if status.is_terminal:
        return f"it already finished ({status.value}): a finished task cannot be cancelled"
    return f"it changed meanwhile and is {status.value} now: look again and retry"


def _act(
    broker: Broker,
    task_id: str,
    action: Callable[[str], TaskResult | None],
    explain: Callable[[TaskResultStatus], str],
    *,
    abbreviated: bool = False,
) -> Outcome:
    """`action` on `task_id`, or on the one task it abbreviates when `abbreviated` and no
    task has that id (see `threadmill_core.cli.inspector.lookup`); why not, if refused."""
    try:
        record = action(task_id)
    except PayloadError as exc:
        return Outcome(task_id=task_id, done=False, reason=_poison(exc))
    if record is not None:
        return Outcome(task_id=task_id, done=True, record=record)
    # Refused by the backend, atomically. Read the task only to say why.
    try:
        current = broker.backend.get(task_id)
    except PayloadError as exc:
        return Outcome(task_id=task_id, done=False, reason=_poison(exc))
    if current is None and abbreviated:
        found = search(broker, task_id)
        if found.task_id is not None:
            return _act(broker, found.task_id, action, explain)
        if found.matches:
            return Outcome(task_id=task_id, done=False, reason=found.ambiguity())
    if current is None:
        return Outcome(task_id=task_id, done=False, reason=_UNKNOWN)
    return Outcome(
        task_id=task_id, done=False, status=current.status, reason=explain(current.status)
    )


def requeue(broker: Broker, task_ids: Iterable[str]) -> Report:
    """Requeue each task (FAILED or CANCELLED back to READY); refusals say why.

    An id no task has may be an abbreviation of one (see `threadmill_core.cli.inspector.lookup`):
    the task it names is requeued; one that names several is refused, listing them.
    """
    outcomes = tuple(
        _act(broker, i, broker.requeue, _why_not_requeued, abbreviated=True) for i in task_ids
    )
    return Report(action="requeue", outcomes=outcomes)


def cancel(broker: Broker, task_ids: Iterable[str]) -> Report:
    """Cancel each task (READY or DEFERRED to CANCELLED; a RUNNING one gets a cancel request,
    see `Broker.cancel`, and its record comes back RUNNING); refusals say why.

    Abbreviated ids are taken as `requeue` takes them.
    """
    outcomes = tuple(
        _act(broker, i, broker.cancel, _why_not_cancelled, abbreviated=True) for i in task_ids
    )
    return Report(action="cancel", outcomes=outcomes)


def requeue_failed(broker: Broker, queue: str, *, page_size: int = PAGE_SIZE) -> Report:
    """Requeue every task of `queue` that was FAILED when this call began.

    FAILED is read a page at a time from its head, and each task is requeued
    on its own (fenced): one that changed since it was read is refused and
    reported. Requeued tasks leave the segment, so the next page is read from
    the head again, past the ones this call could not move (poison). Tasks
    that fail again while this runs (`finished_at` after the start, on the
    backend's clock) are left alone, so a task that fails at once cannot keep
    this running.
    """
    started = broker.backend.now()
    outcomes: list[Outcome] = []
    seen: set[str] = set()  # ids handled, and messages of poison met, so none is reported twice
    stuck = 0  # how many of those are still in FAILED at the head
    while True:
        limit = stuck + page_size
        page = list_tasks(broker, queue, FAILED, offset=0, limit=limit)
        fresh = [item for item in page if _key(item) not in seen]
        if not fresh:
            break
        for item in fresh:
            seen.add(_key(item))
            if isinstance(item, Undecodable):
                outcomes.append(Outcome(task_id="?", done=False, reason=_poison_text(item)))
                stuck += 1
                continue
            if item.finished_at is not None and item.finished_at > started:
                return Report(action="requeue", outcomes=tuple(outcomes))
            outcome = _act(broker, item.id, broker.requeue, _why_not_requeued)
            outcomes.append(outcome)
            if not outcome.done and outcome.status is None and outcome.reason != _UNKNOWN:
                stuck += 1  # poison that peek could read but requeue could not: still there
        if len(page) < limit:
            break
    return Report(action="requeue", outcomes=tuple(outcomes))


def _key(item: Listed) -> str:
    return item.id if isinstance(item, TaskResult) else item.message


def _poison_text(item: Undecodable) -> str:
    return f"{item.message}; purge its segment to remove it"
