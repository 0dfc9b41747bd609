"""The state machine's rules for time and maintenance: the clock, the reaper, the mover, and a
supervisor expiring a dead worker's leases.

`use_lease_after_reap` is the race fencing exists for: a lease expires, a
reaper claims its task, and every fenced operation with the old lease must
be refused.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import multiple, precondition, rule

from threadmill_core.clock import duration_ms
from threadmill_core.models import TaskError
from threadmill_core.testing import strategies as ts
from threadmill_core.testing._machine.calls import CallingMachine
from threadmill_core.testing._machine.values import (
    ADVANCES,
    CLAIM_TTLS,
    DEFERRED,
    FAILED,
    HOUR,
    LEASE_TTLS,
    PHASE,
    READY,
    RUNNING,
    SUCCESSFUL,
    LeaseRef,
    Verdict,
    leases,
)
from threadmill_core.testing.model import Candidate


class UpkeepRules(CallingMachine):
    """Time passing, and what the maintenance loop does."""

    @precondition(lambda self: self.has(RUNNING))
    @rule(
        target=leases,
        limit=st.integers(min_value=1, max_value=4),
        claim_ttl=st.sampled_from(CLAIM_TTLS),
    )
    def claim_expired(self, limit: int, claim_ttl: timedelta) -> Any:
        """A reaper pass over expired leases: unstarted claims given back, the rest claimed."""
        self.begin(f"claim_expired(limit={limit}, claim_ttl={claim_ttl})")
        return multiple(*self.do_claim_expired(limit, claim_ttl))

    @precondition(lambda self: self.has(RUNNING))
    @rule(
        target=leases,
        lease=leases,
        actions=st.permutations(
            ("complete", "retry", "extend", "decide_many", "mark_started", "release")
        ),
        claim_ttl=st.sampled_from(CLAIM_TTLS),
        error=ts.task_errors(),
        start_first=st.booleans(),
    )
    def use_lease_after_reap(
        self,
        lease: LeaseRef,
        actions: list[str],
        claim_ttl: timedelta,
        error: TaskError,
        start_first: bool,
    ) -> Any:
        """Let a current lease expire and reap it, then try every fenced operation with it.

        A worker's claim is marked started first, or not (drawn): a started
        claim is claimed by the reaper, an unstarted one given back to READY.
        Either way each fenced operation with the old lease must then be
        refused and change nothing. All six are tried (in a drawn order)
        because this is the race fencing exists for, and a missing token
        check in any one of them is the commonest bug.
        """
        task = self.model.tasks.get(lease.task_id)
        if (
            self.model.refusal(lease.serial) is not None
            or task is None
            or task.status is not RUNNING
        ):
            return multiple()
        if start_first and lease.kind == "worker":
            self.begin(f"mark_started([{lease!r}]) before its lease expires", lease.task_id)
            self.do_mark_started([lease])
        assert task.deadline is not None
        late_by = task.deadline - self.model.now_ms  # expired at the deadline itself
        if late_by > 0:
            hours = -(-late_by // duration_ms(HOUR))
            self.begin(f"advance past the deadline of {lease!r}")
            if not self.advance_ms(late_by if self.exact else duration_ms(hours * HOUR + PHASE)):
                return multiple()
        self.begin(f"claim_expired() after {lease!r} expired")
        reaped = self.do_claim_expired(len(self.model.expired()), claim_ttl)
        verdicts: dict[str, Verdict] = {"complete": SUCCESSFUL, "retry": timedelta(0)}
        for action in actions:
            self.every_segment_matches_the_model()
            self.begin(f"{action} with {lease!r} after a reaper claimed its task", lease.task_id)
            if action == "extend":
                self.do_extend([lease], LEASE_TTLS[0], many=False)
            elif action == "mark_started":
                self.do_mark_started([lease])
            elif action == "release":
                self.do_release([lease])
            else:
                decision = self.decision(lease, verdicts.get(action, FAILED), 1, error, False)
                self.send([decision], many=action == "decide_many")
        return multiple(*reaped)

    @precondition(lambda self: self.has(RUNNING))
    @rule(worker=ts.worker_names())
    def expire_leases(self, worker: str) -> None:
        """A supervisor saw a worker die: that worker's live leases expire now, nobody else's."""
        self.begin(f"expire_leases({worker!r})")
        got = self.backend.expire_leases(worker)
        cut = self.model.expire_leases(worker)
        self.named = set(cut)
        if type(got) is not int or got != len(cut):
            self.fail(
                "expire_leases() must expire every live lease of the worker's claims (a "
                "reaper's claim, an expired lease and other workers' leases left alone) "
                "and answer how many",
                len(cut),
                got,
                f"leases it must have expired: {cut}",
            )

    @precondition(lambda self: self.has(DEFERRED))
    @rule(limit=st.integers(min_value=1, max_value=4))
    def promote_due(self, limit: int) -> None:
        """Promote due DEFERRED tasks of every queue."""
        self.begin(f"promote_due(limit={limit})")
        got = self.backend.promote_due(limit=limit)

        def choose(candidates: list[Candidate], limit: int) -> list[str]:
            expected = candidates[:limit]
            if got != len(expected):
                self.fail(
                    f"promote_due() promoted {got} tasks where {len(expected)} were due "
                    f"(limit {limit})",
                    len(expected),
                    got,
                )
            if self.exact or not expected:
                return [task_id for _, task_id in expected]
            # A limit that cuts a tie: which of the tied tasks went is the backend's choice.
            cut = expected[-1][0]
            sure = [task_id for key, task_id in expected if key != cut]
            tied = [task_id for key, task_id in candidates if key == cut]
            went = [i for i in tied if (r := self.backend.get(i)) is not None and r.status is READY]
            return sure + went

        self.model.promote_due(limit=limit, choose=choose)

    @precondition(lambda self: self.has(RUNNING) or self.has(DEFERRED))
    @rule(offset=st.sampled_from(ADVANCES))
    def advance(self, offset: timedelta) -> None:
        """Let time pass (leases expire, deferred tasks fall due)."""
        self.begin(f"advance({offset})")
        self.advance_ms(duration_ms(offset))

    @precondition(lambda self: self.exact and bool(self.moments_ahead()))
    @rule()
    def advance_to_the_next_moment(self) -> None:
        """Stop the clock exactly on the next due time or lease deadline (exact clocks only)."""
        self.begin("advance exactly to the next due time or lease deadline")
        self.advance_ms(min(self.moments_ahead()) - self.model.now_ms)
