"""What the protocol model is made of: its tasks, leases and predicted answers.

Times are epoch milliseconds; `stamp` turns them into the datetimes a
backend stores. A segment entry's *group key* is its order without the
final tie-break on id (see `threadmill_core.testing.model` on ties).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from threadmill_core.clock import from_ms
from threadmill_core.models import (
    JSON,
    Progress,
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
    #: As enqueued, never changed.
    headers: dict[str, str]
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
    #: As enqueued (whole milliseconds, rounded up), never changed.
    time_limit: timedelta | None = None
    #: The last progress stored (`updated_at` set), kept until `requeue`.
    progress: Progress | None = None
    #: When a cancel was first requested while the task ran; cleared by `requeue`.
    cancel_requested_at: int | None = None


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
    #: Whether a cancel was requested (`extend` says so; `claim` never does).
    cancel_requested: bool = False

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
#: The token-clearing action of `claim_expired` finalizing a task with a cancel request.
CANCEL_EXPIRED = "claim_expired() finalizing it CANCELLED at its cancel request"
