"""The model's maintenance: the reaper's pass, cut leases and due DEFERRED tasks."""

from __future__ import annotations

import itertools

from threadmill_core.testing._model.records import (
    CANCEL_EXPIRED,
    GIVE_BACK,
    RUNNING,
    Candidate,
    Chooser,
    ExpectedLease,
    Settler,
    take_first,
)
from threadmill_core.testing._model.state import ModelState


class UpkeepModel(ModelState):
    """`claim_expired`, `expire_leases` and `promote_due`, with the candidates they pick from."""

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

    def uncharged(self, task_id: str) -> bool:
        """Whether the reaper's pass deals with the expired task itself instead of claiming
        it: an unstarted claim (given back) or a cancel request (finalized CANCELLED)."""
        return self.unstarted(task_id) or self.tasks[task_id].cancel_requested_at is not None

    def claim_expired(
        self,
        *,
        limit: int,
        claim_ttl_ms: int,
        choose: Chooser = take_first,
        settle: Settler | None = None,
    ) -> list[ExpectedLease]:
        """The reaper's pass: give back the expired unstarted claims it meets, finalize those
        with a cancel request CANCELLED (an unstarted claim undone first), and make a fresh
        reaper lease on up to `limit` of the other expired tasks (not an attempt).

        `choose` picks the claimed tasks among the charged candidates. The
        pass stops at its `limit`-th claim, so an uncharged task after that
        one stays as it is. Where that last claim is tied (same deadline)
        with uncharged tasks, `settle` says which of those the pass reached
        (default: those before it by id, as on an exact clock). Tasks given
        back with one deadline enter READY together: tied, then by id.
        """
        expired = self.expired()
        unstarted = [c for c in expired if self.uncharged(c[1])]
        charged = [c for c in expired if not self.uncharged(c[1])]
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
                if not self.unstarted(task.id):  # started, or a lapsed reaper claim
                    self._finalize_cancelled(task)
                    self._clear_token(task, CANCEL_EXPIRED)
                    continue
                task.unstarted_expiries += 1
                self._give_back(
                    task, seq, CANCEL_EXPIRED if task.cancel_requested_at else GIVE_BACK
                )
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
