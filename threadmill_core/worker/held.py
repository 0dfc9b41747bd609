"""The leases a worker holds, from its claim until its outcome is acknowledged.

A `HeldTask` is created for every lease a claim brings. It waits in the
prefetch until a task thread starts it, runs, and is held on while its
outcome (an `Outcome`) waits to be acknowledged; only then is it forgotten.
`HeldTasks` is the worker's register of them, which the heartbeat renews:
so a task's lease stays alive for as long as the worker holds the task,
outages included.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, NamedTuple

import attrs

from threadmill_core.context import TaskContext
from threadmill_core.models import Decision, Lease, Progress

if TYPE_CHECKING:
    from threadmill_core.worker.interrupts import Attempt


@attrs.define(eq=False)
class HeldTask:
    """A lease this worker holds: waiting for a thread, running, or being acknowledged.

    The heartbeat replaces `lease` with each renewal (the token stays the
    same) and calls `mark_lost` when one is refused.
    """

    lease: Lease
    #: What the heartbeat renews the lease for: the worker's, or the task's own.
    lease_ttl: timedelta
    #: Set when a thread starts the task.
    started: bool = False
    #: The context the task was called with; None while it waits in the
    #: prefetch, and for a task that takes no context (none is made for it).
    context: TaskContext | None = None
    #: A renewal was refused: a task waiting must not start, and a running
    #: task's outcome is not written.
    lost: bool = False
    #: Set once the outcome is being sent: a refused renewal then means the
    #: outcome landed (or will be refused itself), not that the lease is lost.
    acknowledging: bool = False
    #: Seconds the task ran, for the acknowledgement's log line.
    duration: float = 0.0
    #: The running attempt, which the heartbeat thread may stop (time limit, cancel).
    attempt: Attempt | None = None
    #: A heartbeat's renewal said a cancel was requested (`Lease.cancel_requested`).
    cancel_requested: bool = False
    #: The last progress sent for the task (`send_progress`): the context's
    #: `TaskContext.reported_progress` is sent again only once it is another.
    sent_progress: Progress | None = None
    #: The claim's `Lease.unstarted_expiries` (a renewal's lease need not carry it):
    #: more than 0, the start is recorded before the task runs.
    given_back: int = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.given_back = self.lease.unstarted_expiries

    def mark_lost(self) -> None:
        """The lease was taken away: say so here, and in the task's context if it has one."""
        self.lost = True
        if self.context is not None:
            self.context.mark_lease_lost()


class Outcome(NamedTuple):
    """What a task thread hands back: the decision to send, or None when there is none.

    None means the task must not be acknowledged (its lease was lost, or
    the worker failed running it): it is only forgotten. A named tuple: one
    is made for every task run.
    """

    held: HeldTask
    decision: Decision | None


class HeldTasks:
    """Every `HeldTask` of one worker, by lease token. Thread-safe."""

    def __init__(self) -> None:
        self._by_token: dict[str, HeldTask] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._by_token)

    def add(self, tasks: Iterable[HeldTask]) -> None:
        with self._lock:
            for held in tasks:
                self._by_token[held.lease.token] = held

    def forget(self, held: HeldTask) -> None:
        """Stop holding `held` (acknowledged, given back, or left to lapse)."""
        with self._lock:
            if self._by_token.get(held.lease.token) is held:
                del self._by_token[held.lease.token]

    def forget_all(self, tasks: Iterable[HeldTask]) -> None:
        """`forget` each of `tasks`, under one lock (a batch's acknowledgement)."""
        by_token = self._by_token
        with self._lock:
            for held in tasks:
                if by_token.get(held.lease.token) is held:
                    del by_token[held.lease.token]

    def all(self) -> list[HeldTask]:
        with self._lock:
            return list(self._by_token.values())

    def lease_ttls(self) -> set[timedelta]:
        with self._lock:
            return {held.lease_ttl for held in self._by_token.values()}
