"""Acknowledging: sending a batch of task outcomes to the backend in one `decide_many`.

An acknowledgement is never dropped for an outage: `send_outcomes` lets
`BackendUnavailable` through, and the worker sends the same batch again,
with the same leases, until the backend answers. A send that was applied
but whose reply was lost is recognised by the backend when the same
decisions come again, and answered as the first time; a lease that really
was lost meanwhile is refused, the only way an outcome is not written.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta

from threadmill_core.backend import Backend
from threadmill_core.errors import BackendUnavailable
from threadmill_core.models import Decision, Lease, TaskResult, TaskResultStatus
from threadmill_core.plugins import notify, notify_each
from threadmill_core.worker.held import HeldTasks, Outcome
from threadmill_core.worker.logs import failure_fields, task_fields

log = logging.getLogger("threadmill.worker")


def send_outcomes(backend: Backend, outcomes: Sequence[Outcome], held: HeldTasks) -> int:
    """Send the decisions of `outcomes` in one `decide_many`; how many the backend took.

    Every outcome's task is then forgotten from `held`, those without a
    decision included. `BackendUnavailable` goes to the caller, and then
    nothing is forgotten. A batch the backend refuses to take for another
    reason (our bug, not a task's) is sent again one decision at a time, so
    only the decision at fault is lost: its lease lapses and is reaped.
    """
    taken = 0
    sending = [(item, decision) for item in outcomes if (decision := item.decision) is not None]
    if sending:
        # The heartbeat may have renewed a lease meanwhile: same token, so a
        # decision made with the claim's lease is still the current holder's.
        decisions = [decision for _, decision in sending]
        try:
            stored = backend.decide_many(decisions)
        except BackendUnavailable:
            raise
        except Exception:
            log.exception("acknowledging %d tasks failed; sending them one by one",
                          len(decisions))  # fmt: skip
            stored = [_decide_one(backend, decision) for decision in decisions]
        finished = []
        for (item, decision), record in zip(sending, stored, strict=True):
            if record is None:
                _log_refusal(decision)
                continue
            taken += 1
            if _announce(item, decision, record):
                finished.append(record)
        # Once per batch, not per task: whether some plugin listens is asked once.
        notify_each("threadmill_task_finished", "record", finished)
        if finished:
            notify("threadmill_tasks_finished", records=finished)
    held.forget_all([item.held for item in outcomes])
    return taken


def give_back_leases(
    backend: Backend, leases: Sequence[Lease], delay: timedelta | None = None
) -> list[TaskResult | None]:
    """`Backend.release` of `leases` (unstarted claims), announcing the ones it took.

    ``threadmill_tasks_given_back`` gets the records the backend stored, once
    per call; errors go to the caller, as from `Backend.release`.
    """
    released = backend.release(leases) if delay is None else backend.release(leases, delay)
    back = [record for record in released if record is not None]
    if back:
        notify("threadmill_tasks_given_back", records=back)
    return released


def _decide_one(backend: Backend, decision: Decision) -> TaskResult | None:
    try:
        return backend.decide_many([decision])[0]
    except BackendUnavailable:
        raise
    except Exception:
        log.exception("task %s: acknowledgement failed; its lease will lapse and be reaped",
                      decision.lease.task_id, extra=task_fields(decision.record))  # fmt: skip
        return None


def _log_refusal(decision: Decision) -> None:
    record = decision.record
    log.warning(
        "task %s (%s) attempt %d: acknowledgement refused, the lease was lost",
        record.id, record.task_path, record.attempts, extra=task_fields(record),
    )  # fmt: skip


def _announce(item: Outcome, decision: Decision, stored: TaskResult) -> bool:
    """Log one decision the backend took; whether its task is now finished.

    A retry is announced here (``threadmill_task_retried``); the caller
    announces the finished ones of a batch together.
    """
    if not item.held.started:  # quarantined without running
        return True
    record = decision.record
    if decision.retry_delay is not None:
        log.warning(
            "task %s (%s) attempt %d failed after %.3f s (%s); retry in %.3f s",
            record.id, record.task_path, record.attempts, item.held.duration,
            record.errors[-1].exception_class_path, decision.retry_delay.total_seconds(),
            extra=failure_fields(record),
        )  # fmt: skip
        notify("threadmill_task_retried", record=stored, delay=decision.retry_delay)
        return False
    # A failure is worth a line at WARNING; success is the norm, at DEBUG.
    level = logging.DEBUG if stored.status is TaskResultStatus.SUCCESSFUL else logging.WARNING
    if log.isEnabledFor(level):
        log.log(
            level,
            "task %s (%s) attempt %d %s in %.3f s",
            record.id, record.task_path, record.attempts, stored.status.value,
            item.held.duration,
            extra=task_fields(record) if level == logging.DEBUG else failure_fields(record),
        )  # fmt: skip
    return True
