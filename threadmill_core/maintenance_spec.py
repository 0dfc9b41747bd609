"""The storage interface's maintenance operations: what `Backend` inherits from here.

`threadmill_core.backend.Backend` is the one spec every backend implements
(its module docstring is the vocabulary: segments, clock, tokens, recorded
starts, cancel requests, poison); `MaintenanceSpec` holds the operations the
maintenance loop calls (the reaper's `claim_expired`, the supervisor's
`expire_leases`, `promote_due`). Backends subclass `Backend`, never this class.
"""

from __future__ import annotations

import abc
from datetime import timedelta

from threadmill_core.models import Lease


class MaintenanceSpec(abc.ABC):
    """The reaper's and the supervisor's operations (see the module doc)."""

    # --- maintenance -----------------------------------------------------------------

    @abc.abstractmethod
    def claim_expired(self, *, limit: int, claim_ttl: timedelta) -> list[Lease]:
        """The reaper's pass: claim up to `limit` expired tasks, giving back unstarted ones.

        The pass goes through the RUNNING tasks whose deadline is at or
        before `now()`, over all queues, oldest deadline first (then by id),
        and does one of three things with each:

        - Finalizes it CANCELLED, when a cancel was requested for it
          (`cancel_requested_at` set; see "Cancel requests"), whatever its
          claim (then neither of the two below): `finished_at` = `now()`,
          the token cleared (a late decision with the expired lease is
          refused), no error recorded, and an unstarted worker's claim
          undone and counted first as for a give-back below. It is not
          returned and does not count toward `limit`.
        - Gives it back, when its current token is a worker's claim (from
          `claim`) whose start was never recorded (`mark_started`). The task
          goes to the tail of READY
          exactly as `release` gives a task back: the claim's attempt undone
          (`attempts` - 1, the claim's worker dropped from `worker_ids`,
          `started_at` and `last_attempted_at` cleared when no attempt is
          left), `errors`, `run_after` and the arguments kept, the token
          cleared. No error is recorded and no retry policy asked: work that
          never ran is not charged. The task's count of these give-backs goes
          up by one; nothing resets it (`requeue` keeps it; an id purged and
          enqueued again is a new task and starts from zero), and no record
          field shows it: the leases of later claims do (see "Given back,
          then started first"). A given-back task is not returned.
        - Claims it otherwise (its start was recorded, or its current token
          is a reaper's claim that lapsed): a fresh
          token and the deadline `now() + claim_ttl`, so no other pass
          decides it while this one does; the reaper then decides with
          `retry` or `complete`, charging the expired attempt. A claim never
          decided lapses like any lease, and a later pass takes the task up
          again. A reaper claim is not an attempt: `attempts`, `worker_ids`,
          `started_at` and `last_attempted_at` are unchanged.

        The pass stops when it has claimed `limit` tasks or none is left.
        Given-back and cancelled tasks do not count toward `limit`: every one
        the pass meets before its last claim is dealt with in the same call,
        so a call that returns fewer than `limit` leases has left no expired task
        behind (poison aside, see "Poison"), and one call after a crash gives
        back a dead worker's whole prefetch. Atomic per task.
        """

    @abc.abstractmethod
    def expire_leases(self, worker: str) -> int:
        """Expire at once the live leases of `worker`, known to be dead; return how many.

        A supervisor that sees one of its worker processes die calls this with
        that process's worker id, so the reaper's next pass takes its tasks up
        instead of waiting out their leases. Every RUNNING task whose current
        token is a worker's claim (from `claim`) by `worker` (the last entry
        of its `worker_ids`) and whose lease deadline is later than `now()`
        gets the deadline `now()`, as if the lease had run out: the task moves
        within RUNNING (ordered by deadline) and `claim_expired` decides it by
        its usual rules (an unstarted claim given back uncharged, a started
        one charged, one with a cancel request finalized CANCELLED).

        Nothing else changes: not the token (the lease stays fenced as any
        expired one: its holder may still act with it until a reaper pass
        takes the task), not the record, not a reaper's claim (its
        `worker_ids` still end with the worker whose claim it took over), not
        a lease already expired, not a lease of any other worker. A repeat
        finds nothing left to expire and answers 0, as does a worker holding
        no lease. Atomic per task.
        """

    @abc.abstractmethod
    def promote_due(self, *, limit: int) -> int:
        """Move up to `limit` due DEFERRED tasks (any queue) to READY; return how many.

        Tasks are promoted in DEFERRED order and enter READY in that order.
        """
