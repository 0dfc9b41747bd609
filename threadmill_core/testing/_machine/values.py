"""What the state machine's rules draw and hand each other, and the time discipline they keep.

See `threadmill_core.testing.machine` for why every duration is whole hours
and every advance whole hours plus one minute.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import Bundle

from threadmill_core.models import JSON, Lease, RetryPolicySpec, TaskResult, TaskResultStatus
from threadmill_core.testing import strategies as ts

READY = TaskResultStatus.READY
DEFERRED = TaskResultStatus.DEFERRED
RUNNING = TaskResultStatus.RUNNING
SUCCESSFUL = TaskResultStatus.SUCCESSFUL
FAILED = TaskResultStatus.FAILED
CANCELLED = TaskResultStatus.CANCELLED

MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
#: An advance is whole hours plus this; at most `MAX_ADVANCES` of them keep
#: their sum's minutes below the hour (see `threadmill_core.testing.machine`).
PHASE = MINUTE
MAX_ADVANCES = 50
#: Every segment is read at least once in this many steps (see
#: `CheckingMachine.every_segment_matches_the_model`).
FULL_CHECK_EVERY = 5
#: Kept between the total advance and `Harness.result_ttl`.
RESULT_TTL_MARGIN = HOUR

LEASE_TTLS = (HOUR, 2 * HOUR, 3 * HOUR)
CLAIM_TTLS = (HOUR, 2 * HOUR)
RETRY_DELAYS = (timedelta(0), HOUR, 2 * HOUR)
#: `run_after` relative to now; None enqueues without one.
RUN_AFTER_OFFSETS = (None, None, -HOUR, timedelta(0), HOUR, 2 * HOUR)
ADVANCES = (PHASE, HOUR + PHASE, 2 * HOUR + PHASE, 3 * HOUR + PHASE)

#: A decision: a status finalizes (`complete`), a delay sends back (`retry`).
Verdict = TaskResultStatus | timedelta
VERDICTS: st.SearchStrategy[Verdict] = st.sampled_from(
    (SUCCESSFUL, FAILED, CANCELLED, *RETRY_DELAYS)
)

#: Fields of an enqueued record that the backend sets itself, whatever the caller sent.
BACKEND_FIELDS = (
    "status",
    "enqueued_at",
    "started_at",
    "last_attempted_at",
    "finished_at",
    "attempts",
    "errors",
    "worker_ids",
    "return_value",
    "progress",
    "cancel_requested_at",
)
REAPER_HINTS = {
    "attempts": "a reaper claim counted as an attempt",
    "worker_ids": "a reaper claim was recorded as a worker's attempt (worker_ids changed)",
    "last_attempted_at": "a reaper claim moved last_attempted_at (it is not an attempt)",
    "started_at": "a reaper claim moved started_at (it is not an attempt)",
}

#: What `claim_expired` must do to a task whose expired claim never recorded a start.
GIVE_BACK_HINTS = {
    "status": "claim_expired() must give back an expired claim whose start was never recorded "
    "(READY, uncharged)",
    "attempts": "claim_expired() giving back an unstarted claim must undo its attempt "
    "(attempts - 1)",
    "worker_ids": "claim_expired() giving back an unstarted claim must drop its worker from "
    "worker_ids",
    "errors": "claim_expired() giving back an unstarted claim must record no error (it never ran)",
    "started_at": "claim_expired() giving back an unstarted claim must clear started_at when no "
    "attempt is left",
    "last_attempted_at": "claim_expired() giving back an unstarted claim must clear "
    "last_attempted_at when no attempt is left",
}

#: What `claim_expired` must do to an expired task with a cancel request.
CANCEL_EXPIRED_HINTS = {
    "status": "claim_expired() must finalize an expired task with a cancel request CANCELLED "
    "(it never goes back, nor to the reaper)",
    "finished_at": "claim_expired() finalizing a task at its cancel request must set "
    "finished_at to now()",
    "errors": "claim_expired() finalizing a task at its cancel request must record no error",
    "attempts": "claim_expired() finalizing an unstarted claim at its cancel request must undo "
    "its attempt (attempts - 1)",
    "worker_ids": "claim_expired() finalizing an unstarted claim at its cancel request must drop "
    "its worker from worker_ids",
}


# --- the things rules pass around ----------------------------------------------------


@dataclass(frozen=True)
class LeaseRef:
    """A lease the backend returned, paired with the model's serial for it."""

    serial: int
    kind: str
    lease: Lease

    @property
    def task_id(self) -> str:
        return self.lease.record.id

    def __repr__(self) -> str:
        return f"<{self.kind} lease #{self.serial} on {self.task_id!r}>"


@dataclass(frozen=True)
class SentDecision:
    """A complete (`delay` None) or retry decision as it was sent, kept to send it again."""

    ref: LeaseRef
    record: TaskResult
    delay: timedelta | None
    #: The record also carried fields the backend must not take (queue, attempts, ...).
    tampered: bool

    def __repr__(self) -> str:
        what = self.record.status.value if self.delay is None else f"retry after {self.delay}"
        return f"<{what} with {self.ref!r}>"


@attrs.frozen(kw_only=True)
class TaskSpec:
    """What a rule draws for one new task."""

    id_prefix: str
    queue: str
    priority: int
    run_after: timedelta | None
    args: list[JSON]
    kwargs: dict[str, JSON]
    retry: RetryPolicySpec | None
    headers: dict[str, str]
    time_limit: timedelta | None
    #: Also send the fields the backend must ignore (status, attempts, ...), filled with junk.
    tamper: bool


def task_specs() -> st.SearchStrategy[TaskSpec]:
    """New tasks for the machine to enqueue."""
    return st.builds(
        TaskSpec,
        id_prefix=st.integers(min_value=0, max_value=0xFFF).map("{:03x}".format),
        queue=ts.queue_names(),
        priority=ts.priorities(),
        run_after=st.sampled_from(RUN_AFTER_OFFSETS),
        args=ts.task_args(),
        kwargs=ts.task_kwargs(),
        retry=ts.retry_specs(),
        headers=ts.task_headers(),
        time_limit=ts.time_limits(),
        tamper=st.booleans(),
    )


#: The bundles rules draw from: task ids enqueued, leases returned (stale ones
#: kept, so that using one must be refused), decisions sent (to send again).
task_ids = Bundle("task_ids")
leases = Bundle("leases")
decisions = Bundle("decisions")
