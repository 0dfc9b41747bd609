"""The maintenance loop's two jobs: the reaper and the mover.

The reaper takes over RUNNING tasks whose lease expired (the worker died or
stalled), records an `AcknowledgementTimeout`, and lets the task's retry
policy decide, through the same `threadmill_core.retry.decide` a worker uses
for a raised exception. Its claim is fenced like a worker's, so several
reapers (several supervisors) on one backend never decide a task twice, and a
late acknowledgement from the presumed-dead worker is refused.

The mover promotes DEFERRED tasks that fell due. Claims promote too, so the
mover matters for queues nobody is claiming from and for accurate counts.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from threadmill_core.backend import Backend
from threadmill_core.errors import AcknowledgementTimeout
from threadmill_core.models import TaskError
from threadmill_core.plugins import notify
from threadmill_core.retry import decide

log = logging.getLogger("threadmill.maintenance")

ACK_TIMEOUT_PATH = f"{AcknowledgementTimeout.__module__}.{AcknowledgementTimeout.__qualname__}"


def reap(
    backend: Backend, *, limit: int = 100, claim_ttl: timedelta = timedelta(seconds=30)
) -> int:
    """One reaper pass over up to `limit` expired leases; returns how many were decided.

    A claim whose decision is refused (another holder moved the task on) is
    skipped; a pass that dies half way leaves its claims to lapse and be
    taken up again.
    """
    leases = backend.claim_expired(limit=limit, claim_ttl=claim_ttl)
    if not leases:
        return 0
    decisions = []
    for lease in leases:
        record = lease.record
        notify("threadmill_lease_expired", record=record)
        error = TaskError(
            exception_class_path=ACK_TIMEOUT_PATH,
            message=(
                f"the lease of attempt {record.attempts} expired before the worker "
                f"({record.worker_ids[-1] if record.worker_ids else 'unknown'}) acknowledged it"
            ),
        )
        decisions.append(decide(lease, error))
    stored = backend.decide_many(decisions)
    decided = 0
    finished = []
    for decision, result in zip(decisions, stored, strict=True):
        if result is None:
            log.info(
                "reaper: task %s moved on before the decision; left alone", decision.lease.task_id
            )
            continue
        decided += 1
        if decision.retry_delay is None:
            log.warning(
                "reaper: task %s (%s) lease expired on attempt %d; FAILED, no retry left",
                result.id, result.task_path, result.attempts,
            )  # fmt: skip
            notify("threadmill_task_finished", record=result)
            finished.append(result)
        else:
            log.warning(
                "reaper: task %s (%s) lease expired on attempt %d; retry in %.3f s",
                result.id, result.task_path, result.attempts, decision.retry_delay.total_seconds(),
            )  # fmt: skip
            notify("threadmill_task_retried", record=result, delay=decision.retry_delay)
    if finished:
        notify("threadmill_tasks_finished", records=finished)
    return decided


def promote(backend: Backend, *, limit: int = 1000) -> int:
    """One mover pass: promote up to `limit` due DEFERRED tasks; returns how many."""
    return backend.promote_due(limit=limit)
