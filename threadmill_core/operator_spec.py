"""The storage interface's operations for people and tools: what `Backend` inherits from here.

`threadmill_core.backend.Backend` is the one spec every backend implements
(its module docstring is the vocabulary: segments, clock, tokens, poison);
`OperatorSpec` holds the part of it that the task's life does not go
through: inspection (`get`, `peek`, `counts`, `rates`), operator actions
(`requeue`, `cancel`, `request_cancel`, `purge`), schedule pauses (`threadmill_core.pauses`)
and live workers (`threadmill_core.live_workers`). Backends subclass
`Backend`, never this class.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from datetime import timedelta

from threadmill_core.checks import check_window
from threadmill_core.live_workers import WorkerInfo
from threadmill_core.models import QueueCounts, QueueRates, TaskResult, TaskResultStatus
from threadmill_core.pauses import SchedulePause

#: How far back a backend's telemetry reaches (see `Backend.rates`): older
#: buckets are deleted, so the history of one queue is bounded however busy it is.
RATE_HISTORY = timedelta(hours=1)
#: The coarsest time bucket a backend's telemetry may count in.
RATE_BUCKET_MAX = timedelta(seconds=10)


class OperatorSpec(abc.ABC):
    """Inspection, operator actions, schedule pauses and live workers (see the module doc)."""

    # --- inspection ------------------------------------------------------------------

    @abc.abstractmethod
    def get(self, task_id: str) -> TaskResult | None:
        """The stored record, or None if no such task exists (or its result expired)."""

    @abc.abstractmethod
    def peek(
        self,
        queue: str,
        status: TaskResultStatus,
        *,
        offset: int = 0,
        limit: int = 100,
    ) -> list[TaskResult]:
        """Up to `limit` records of one segment, in segment order, skipping `offset`."""

    @abc.abstractmethod
    def counts(self) -> Mapping[str, QueueCounts]:
        """Counts per segment for every queue that holds at least one task."""

    def rates(self, window: timedelta) -> Mapping[str, QueueRates] | None:
        """Tasks that entered and finished per queue over the last `window`; None if unknown.

        A backend that keeps telemetry counts, per queue, the tasks that
        entered it (stored by `enqueue`, not a repeat of an id already stored;
        sent back by `requeue`) and the tasks that finished (reached
        SUCCESSFUL, FAILED or CANCELLED, quarantined poison included), each
        counted atomically with the change that caused it, on the backend's
        clock. Retries, promotions, give-backs (`release`, and `claim_expired` giving
        back an unstarted claim), purges and expiring results are neither.

        The counts sit in time buckets of the backend's choosing, at most
        `RATE_BUCKET_MAX` long, kept for `RATE_HISTORY` and then deleted: a
        bounded history (at most one hour of buckets per queue) whatever the
        load. The window is whole buckets: the one holding `now()` and those
        before it, back over `window` rounded up to whole buckets. A `window`
        longer than the history kept is answered over the history, and each
        `QueueRates.window` says how long was covered. A queue with nothing
        entering or finishing in the window is absent; an idle backend with
        telemetry returns an empty mapping.

        The default returns None: this backend keeps no history, and callers
        show rates as unknown, not as zero. A `window` that is not a positive
        `timedelta` is a `ValueError`, here and in every override.
        """
        check_window(window)
        return None

    # --- operator actions ------------------------------------------------------------

    @abc.abstractmethod
    def requeue(self, task_id: str) -> TaskResult | None:
        """Move a FAILED or CANCELLED task to the tail of READY; return the stored record.

        `id`, `errors` and `attempts` are kept; `finished_at`,
        `return_value`, `progress` and `cancel_requested_at` are cleared, and
        so is the token. Refused (None) for
        any other status or an unknown id, so a requeue can never resurrect a
        task that is running or that finished successfully.
        """

    @abc.abstractmethod
    def cancel(self, task_id: str) -> TaskResult | None:
        """Move a READY or DEFERRED task to CANCELLED (`finished_at` = `now()`).

        Refused (None) for any other status or an unknown id. A RUNNING task
        is stopped through its lease holder instead (`request_cancel`).
        """

    @abc.abstractmethod
    def request_cancel(self, task_id: str) -> TaskResult | None:
        """Ask the holder of a RUNNING task's lease to stop it; return the stored record.

        Stores `cancel_requested_at` = `now()` on the RUNNING task, whatever
        its claim (a worker's, started or not, or a reaper's), and returns the
        record; nothing else changes (not the token, the deadline, nor the
        task's place in RUNNING). The first request wins: a repeat returns the
        record unchanged, its `cancel_requested_at` the first one. What the
        request then does is the backend module's "Cancel requests": the next
        renewal of the lease says so (`Lease.cancel_requested`), a `complete`
        with status CANCELLED finalizes the task, and a task with a request
        never goes back to READY or DEFERRED.

        Refused (None) for a READY or DEFERRED task (`cancel` it), a finished
        task and an unknown id. Not fenced by a token (an operator's call,
        made without a lease); atomic.
        """

    @abc.abstractmethod
    def purge(self, queue: str, status: TaskResultStatus) -> int:
        """Delete every task of one segment of `queue`; return how many were deleted.

        RUNNING cannot be purged (`ValueError`): a running task belongs to its
        lease holder.
        """

    # --- schedules ---------------------------------------------------------------------

    @abc.abstractmethod
    def set_schedule_paused(self, name: str, paused: bool) -> SchedulePause:
        """Store that the schedule `name` is paused (or not), as of `now()`; return that.

        For every scheduler on the store (see `threadmill_core.worker.scheduling`):
        a paused schedule stores no ticks, and a resumed one never catches
        up a tick at or before its `since`. Setting the state it already has
        changes nothing and returns the stored state. `name` is checked
        (`check_schedule_name`, `ValueError`) before anything changes.
        """

    @abc.abstractmethod
    def schedule_pauses(self) -> dict[str, SchedulePause]:
        """The state `set_schedule_paused` stored for each schedule named so far, by name."""

    # --- live workers ----------------------------------------------------------------

    @abc.abstractmethod
    def register_worker(self, info: WorkerInfo, ttl: timedelta) -> WorkerInfo:
        """Store `info` as the live entry of worker `info.id`, seen at `now()`; return it as stored.

        The entry replaces any entry of that id and lives until `now() + ttl`
        (a later call refreshes it); `workers` lists it until then. The
        returned entry is `info` with `last_seen` = `now()` (what `info`
        carries there is ignored). `ValueError` (nothing stored) for an
        `info` that is not a `WorkerInfo`, an id `check_worker_id` refuses,
        or a `ttl` that is not a positive timedelta. See
        `threadmill_core.live_workers`.
        """

    @abc.abstractmethod
    def unregister_worker(self, worker_id: str) -> bool:
        """Delete the live entry of `worker_id`; whether there was one (expired ones count not).

        `ValueError` for an id `check_worker_id` refuses.
        """

    @abc.abstractmethod
    def workers(self) -> list[WorkerInfo]:
        """Every live entry (`register_worker`), by id: none whose `now() + ttl` is past.

        An entry whose time is up is never listed; the backend may delete it
        here or on any write of the entries.
        """
