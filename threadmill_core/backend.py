"""The storage interface: what every backend implements.

This module is the protocol. `Backend` is an abstract base class, so a
backend missing an operation fails when it is built, not in production.
Each method's docstring is its specification; the conformance kit in
`threadmill_core.testing` checks every backend against a model of it.

Vocabulary
----------
Segments. Every task is in exactly one segment of its queue: READY (ordered
by priority, higher first, then by the order tasks entered READY), DEFERRED
(ordered by `run_after`, then by id), RUNNING (ordered by lease deadline), or
one of the terminal SUCCESSFUL, FAILED, CANCELLED (kept for the backend's
`result_ttl` after `finished_at`, then gone; ordered by `finished_at`, then
by id).

"Entered READY" is a backend-wide sequence: `enqueue`, `promote_due` (in
DEFERRED order), a zero-delay `retry` and `requeue` each append to the tail
of the task's priority level.

Clock. The backend's own clock is the only clock (`now()`); lease deadlines,
due times and every timestamp it writes come from it, at millisecond
resolution. The client's clock never decides anything, except that a
`run_after` given by the user as an absolute time is taken as it is.

Tokens and fencing. `claim` and `claim_expired` give each task a fresh
token, different from every token the task had before. `extend`, `complete`,
`retry`, `mark_started` and `release` act only while the lease's token is the
task's current token and the task is RUNNING; otherwise they are *refused*:
they change nothing and return None (False for `mark_started`). Refusal is a
return value, not an exception, because a lost lease is normal life.

Recorded starts. Only an attempt that ran is charged. A worker claims ahead
of its threads (prefetch), so a claim is not yet a start: `mark_started`
records that a claimed task began to run, for its current claim only (the
next claim starts unrecorded again). A claim whose start is recorded is
*started*; a worker's claim without one is *unstarted* (a reaper's claim is
neither: it is decided, never marked nor given back). A decision needs no
mark first (`complete` or `retry` imply the task ran), so a task that ends
before its worker gets round to marking it costs no call. When an unstarted
claim's lease expires, `claim_expired` gives the task back to READY as if
that claim never happened, uncharged, and counts it; a started claim that
expires is claimed by the reaper and charged. The records cannot tell an
unstarted claim from a started one: both are RUNNING, with the same fields.

Given back, then started first. A task given back this way may be the one
that killed its worker before its start was recorded, or one claimed beside
it that never ran: nothing tells them apart. So every later claim of it
says so (`Lease.unstarted_expiries`, the count above), and a worker records
that claim's start (`mark_started`) before it runs the task. A task that
kills its worker again is then charged, through its retry policy, and the
tasks claimed beside it, never started, go back uncharged once more: a task
that never ran is never charged, and a poison task cycles once, not forever.

Cancel requests. An operator stops a RUNNING task with `request_cancel`
(READY and DEFERRED ones are cancelled at once by `cancel`). The backend
stores when it was asked (`TaskResult.cancel_requested_at`, the first request
wins) and tells the lease holder at its next renewal (`Lease.cancel_requested`
on what `extend` and `extend_many` return). The holder stops the task and
finalizes it with `complete` and status CANCELLED; a task that finishes
before it hears of the request keeps its outcome (SUCCESSFUL or FAILED). A
task with a cancel request never goes back to READY or DEFERRED: a `retry`
of it, a `release` of it, and `claim_expired` meeting it with its lease
expired (started or unstarted, `expire_leases` included) each finalize it
CANCELLED instead, with `finished_at` = `now()`. `requeue` clears the request.

Progress. A running task reports how far it got; its worker stores the last
report with `record_progress` (fenced as `extend` is), and the backend
stamps it with `now()` (`Progress.updated_at`). The record keeps the last
progress stored (`TaskResult.progress`) through retries and after the task
finishes, until `requeue` clears it. Progress and cancel requests are state
the backend owns, beside the producer's payload (`codec.STATE_FIELDS`).

Repeats. A `complete` or `retry` repeated with the same lease after a lost
reply (the backend applied it, the caller never heard) is recognised: while the
task's token is still that lease's token and the task is still in the state
that decision left it in (terminal for `complete`; READY, DEFERRED or
CANCELLED for `retry`, since a `retry` of a task with a cancel request
finalizes it CANCELLED), the repeat changes nothing and returns the stored
record, as the first call did. The check is on the state, not on which
decision came first: a `retry` with the token of a task that `complete`
finalized CANCELLED is answered so too (the model and every bundled backend
do), while one on a task `complete` left SUCCESSFUL or FAILED is refused.
`requeue` and `cancel` clear the token, ending that window, and so does a
backend finalizing a task itself (`claim_expired` meeting a cancel request).

Atomicity. Every method is one atomic state change: another client sees the
state before it or after it, never between. A method that takes many tasks
(`enqueue`, `claim`, `claim_expired`, `expire_leases`, `mark_started`,
`record_progress`, `release`, `promote_due`, `purge`) may be atomic per task
instead, as long as each task's change is atomic.

Bad arguments. A `limit` that is not an int from 1 to `MAX_COUNT` (a
trillion; `True` and ``"1"`` included), a `lease_ttl` or `claim_ttl` that is not a positive
`timedelta`, a retry delay that is not a `timedelta` of zero or more, a
`complete` status other than SUCCESSFUL, FAILED or CANCELLED, a progress
update that is not a (`Lease`, `Progress`) pair, a decision whose
`record.id` is not its lease's task, a `peek` offset that is not an int
from 0 to `MAX_COUNT`, purging RUNNING: each raises `ValueError` before anything
changes (for a batch, before any of it changes). A bare str where a
sequence of queues is expected is a `TypeError`. A record to enqueue that
the codec cannot carry, or a SUCCESSFUL return value it cannot carry, is an
`UnsupportedValue`. The functions of `threadmill_core.checks` make these
checks (`check_limit`, `check_offset`, `ttl_ms`, `queue_names`,
`check_purgeable`, `check_window`, `check_records`, `check_calls`, `check_delay`,
`check_decision`, `check_progress_updates`; importable from here too); every bundled backend calls
them, and third-party backends should too, so that every backend refuses the
same calls with the same words.

Poison. A stored record that a backend cannot decode (corrupt or foreign
bytes) is never returned from `claim` or `claim_expired`: the backend
finalizes it FAILED with a `TaskQuarantined` error (its `task_path` empty
when even that cannot be read) and goes on with the rest of the batch. A
quarantined task does not count toward `limit` where the backend can avoid
it; one that cannot may return fewer leases than `limit` while tasks remain.
An undecodable task whose unstarted claim expired may be quarantined by
`claim_expired` or given back without being decoded (then `claim`
quarantines it). Operations that must return an undecodable record (`get`, `peek`, `cancel`,
`requeue`, `request_cancel`) raise `PayloadError` naming the task, and an
action raises before it changes anything: poison is not cancelled, requeued
or asked to stop by a call that then reports an error (the kit's
`an_operator_action_on_a_corrupt_record_changes_nothing`). `counts` and
`purge` never decode, so an operator can always count and purge poison.

Corrupt records. Poison never hurts its neighbours: a record whose stored
state or bytes are damaged (missing, garbled, out of range) is quarantined
as above by whichever pass meets it (claim, promotion, reaper), or removed
where no record is left to mark, and every other task of the same claim,
pass or batch (renewals, decisions, start marks, progress and releases
included) is processed as if it were not there; a `release` answers None
for an undecodable task, refusing it (the reaper quarantines it) or giving
it back undecoded (a claim does). The kit's corrupt-record
scenarios (``corrupt``, ``corrupt_batches``) check this through
`Harness.corruptions`.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Sequence
from datetime import datetime, timedelta

# The bad-argument rules live in `checks`; they are re-exported here (see `__all__`),
# where backends imported them before that module existed.
from threadmill_core.checks import (
    MAX_COUNT,
    PURGEABLE_STATUSES,
    check_calls,
    check_decision,
    check_delay,
    check_limit,
    check_offset,
    check_progress_updates,
    check_purgeable,
    check_records,
    check_window,
    queue_names,
    ttl_ms,
)
from threadmill_core.live_workers import WorkerInfo, check_worker_id
from threadmill_core.maintenance_spec import MaintenanceSpec
from threadmill_core.models import (
    Decision,
    Lease,
    Progress,
    TaskCall,
    TaskResult,
    call_record,
)
from threadmill_core.operator_spec import RATE_BUCKET_MAX, RATE_HISTORY, OperatorSpec
from threadmill_core.pauses import SchedulePause, check_schedule_name

__all__ = [
    "MAX_COUNT",
    "NOTHING_DEFERRED",
    "PURGEABLE_STATUSES",
    "RATE_BUCKET_MAX",
    "RATE_HISTORY",
    "Backend",
    "SchedulePause",
    "TaskCall",
    "WorkerInfo",
    "call_record",
    "check_calls",
    "check_decision",
    "check_delay",
    "check_limit",
    "check_offset",
    "check_progress_updates",
    "check_purgeable",
    "check_records",
    "check_schedule_name",
    "check_window",
    "check_worker_id",
    "queue_names",
    "ttl_ms",
]

#: What `Backend.next_due` answers when no task is DEFERRED: the largest
#: timedelta, so ``min(backend.next_due(), ceiling)`` needs no special case.
#: Compare with ``==``; never add it to a datetime (that overflows).
NOTHING_DEFERRED = timedelta.max


class Backend(MaintenanceSpec, OperatorSpec):
    """Durable storage for tasks, implementing the lease/claim/retry protocol.

    Its operations are the methods below, those of the maintenance loop in
    `threadmill_core.maintenance_spec.MaintenanceSpec` (`claim_expired`,
    `expire_leases`, `promote_due`) and, for people and tools, those of
    `threadmill_core.operator_spec.OperatorSpec` (inspection, operator
    actions, cancel requests, schedule pauses, live workers), which it
    inherits: one spec in three files, checked together by the conformance kit.

    Implementations must be safe to call from several threads at once, and
    (for a shared store) from several processes and machines at once.
    """

    # --- clock -----------------------------------------------------------------------

    @abc.abstractmethod
    def now(self) -> datetime:
        """The backend's clock: an aware UTC datetime, millisecond resolution.

        The broker uses it to turn a relative `run_after` into an absolute one,
        so that a client with a wrong clock still defers by the right amount.
        """

    # --- producing -------------------------------------------------------------------

    @abc.abstractmethod
    def enqueue(self, records: Sequence[TaskResult]) -> list[TaskResult]:
        """Store new tasks; return the stored records, in the order given.

        Each record arrives with `id`, `task_path`, `args`, `kwargs`, `queue`,
        `priority`, `run_after`, `retry`, `headers` and `time_limit` set by the
        caller; the backend ignores the other fields and stores `status` READY (or
        DEFERRED when `run_after` is later than `now()`), `enqueued_at` =
        `now()`, `attempts` 0, and no errors, workers, timestamps or return
        value, progress or cancel request. `headers` and `time_limit` never
        change afterwards: every record the backend returns for the task
        (claims, retries, releases, requeues, `get`) carries them as enqueued
        (`codec.encode_enqueued` writes them into the payload, so a backend
        that stores that payload keeps them for free).

        Idempotent on `id`: a record whose id is already stored is not stored
        again, and the stored record is returned in its place; of an id given
        twice in one call, the first record is stored and answers both. A
        stored record that does not decode is never stored over: the call
        raises `PayloadError` naming it, its new records stored or not (see
        "Atomicity"; the kit's
        `an_enqueue_repeating_a_corrupt_records_id_never_replaces_it`).

        Every record is checked (`check_records`) before any is stored: one
        the codec cannot carry raises `UnsupportedValue` and nothing is stored.
        """

    def enqueue_calls(self, template: TaskResult, calls: Sequence[TaskCall]) -> list[TaskResult]:
        """`enqueue` of one record per call: `template` with the call's id and arguments.

        `template` gives what every call shares: `task_path`, `queue`,
        `priority`, `run_after`, `retry`, `headers` and `time_limit` (its own id and arguments are
        ignored). Everything `enqueue` promises holds for the records
        `call_record` makes, as if they were passed to it: stored in the
        order given, idempotent on id, every call checked before any is
        stored (`check_calls`, which refuses what `check_records` refuses).
        The records returned are the stored ones, as `enqueue` returns them.

        `Broker.enqueue` and `Broker.enqueue_many` store through this. The
        default makes the records and calls `enqueue`; a backend may instead
        write what the calls share once per batch and each call's own parts,
        without making a record per call first.
        """
        return self.enqueue([call_record(template, call) for call in calls])

    # --- working ---------------------------------------------------------------------

    @abc.abstractmethod
    def claim(
        self,
        queues: Sequence[str],
        *,
        worker: str,
        lease_ttl: timedelta,
        limit: int = 1,
    ) -> list[Lease]:
        """Move up to `limit` tasks to RUNNING and return a lease on each, best first.

        First, every DEFERRED task of `queues` whose `run_after` is due
        (at or before `now()`) is promoted to READY, as by `promote_due`.
        Then tasks are taken from `queues` in the order given (a later queue
        only once the earlier ones are empty), each in READY order.

        Each claimed task gets: status RUNNING, a fresh token, lease deadline
        `now() + lease_ttl`, `attempts` + 1, `last_attempted_at` = `now()`,
        `started_at` = `now()` if it was never set, and `worker` appended to
        `worker_ids`. The returned lease carries the record as stored and
        the task's count of give-backs (`Lease.unstarted_expiries`, see
        `claim_expired`) and `cancel_requested` False. The claim's start is not
        recorded yet (see `mark_started`). Returns an empty list when nothing is ready.
        """

    @abc.abstractmethod
    def extend(self, lease: Lease, lease_ttl: timedelta) -> Lease | None:
        """Renew a lease: deadline becomes `now() + lease_ttl`, token unchanged.

        Returns the renewed lease, or None (refused) when the token is no
        longer current or the task is no longer RUNNING. The renewed lease's
        `cancel_requested` is True when a cancel was requested for the task
        (`request_cancel`; its record's `cancel_requested_at` is set): its
        holder should stop the task (see "Cancel requests").
        """

    def extend_many(self, leases: Sequence[Lease], lease_ttl: timedelta) -> list[Lease | None]:
        """`extend` for several leases; answers in the order given.

        Heartbeats call this once per beat for all running tasks. The default
        calls `extend` per lease; backends with round trips should override it
        to renew the whole batch in one.
        """
        return [self.extend(lease, lease_ttl) for lease in leases]

    @abc.abstractmethod
    def mark_started(self, leases: Sequence[Lease]) -> list[bool]:
        """Record that the claimed tasks of `leases` began to run; answers in the order given.

        A worker marks, in one call for a batch, the tasks that have run for
        a moment and are not decided yet; see "Recorded starts" above for
        what a recorded start changes (`claim_expired` charges an expired
        started claim, `release` refuses one).

        True for each lease whose token is the task's current token, given
        by `claim`, while the task is RUNNING: that claim's start is now
        recorded. Marking a claim whose start is recorded already is answered
        True and changes nothing, so a repeat after a lost reply is harmless.
        False (refused) for anything else: a stale token, a reaper's lease
        (from `claim_expired`), a task that is no longer RUNNING (a decision
        or a give-back came first) or no longer stored. One refusal does not
        stop the others; a lease given twice in one call is answered twice.

        Nothing a reader sees changes: not the record (`started_at` was set
        by `claim`), not the lease deadline, not the task's place in RUNNING.
        Atomic per task.
        """

    @abc.abstractmethod
    def record_progress(self, updates: Sequence[tuple[Lease, Progress]]) -> list[bool]:
        """Store the progress a running task reported; answers in the order given.

        A worker sends, in one call per heartbeat, the last progress of each
        task it runs whose progress changed since it last sent one. For each
        (lease, progress) whose lease token is the task's current token while
        the task is RUNNING, the task's `progress` becomes `progress` with
        `updated_at` = `now()` (what the caller gave there is ignored) and the
        answer is True. False (refused, nothing changed) for anything else:
        a stale token, a task no longer RUNNING or no longer stored. One
        refusal does not stop the others; of a task given twice in one call,
        the last accepted progress is the one kept.

        Nothing else changes: not the lease deadline, not the task's place in
        RUNNING, not its other fields. Every update is checked before any is
        stored (`check_progress_updates`: a pair that is not a `Lease` and a
        `Progress` is a `ValueError`). Atomic per task.
        """

    @abc.abstractmethod
    def complete(self, lease: Lease, record: TaskResult) -> TaskResult | None:
        """Finalize a RUNNING task as SUCCESSFUL, FAILED or CANCELLED; return the stored record.

        From `record` the backend takes `status` (SUCCESSFUL, FAILED, or
        CANCELLED when the holder stopped the task at a cancel request; any
        other status is a `ValueError`), `errors`, and `return_value` (stored
        for SUCCESSFUL only, None otherwise); it sets `finished_at` = `now()`.
        `progress` and `cancel_requested_at` are kept as stored. Refused
        (None) when the lease's token is no longer current; a repeat after a
        lost reply returns the stored record (see the module doc).
        """

    @abc.abstractmethod
    def retry(self, lease: Lease, record: TaskResult, delay: timedelta) -> TaskResult | None:
        """Send a RUNNING task back for another attempt; return the stored record.

        From `record` the backend takes `errors`. With a delay of exactly zero
        the task goes to the tail of READY (`run_after` unchanged); otherwise to
        DEFERRED with `run_after` = `now() + delay`, the delay rounded up to
        whole milliseconds. `id`, `attempts`, the arguments and `progress` are
        kept. A negative delay is a `ValueError`. Refused (None) as for `complete`.

        A task with a cancel request (`cancel_requested_at` set) does not go
        back: it is finalized CANCELLED instead (`errors` taken from `record`,
        `finished_at` = `now()`, `run_after` unchanged), whatever the delay.
        """

    def decide_many(self, decisions: Sequence[Decision]) -> list[TaskResult | None]:
        """Apply several `complete` / `retry` decisions; answers in the order given.

        Each decision is fenced and atomic on its own, exactly as the single
        call; one refused decision does not stop the others. Workers send
        acknowledgements in batches and the reaper decides a whole pass with
        this. The default calls `complete` or `retry` per decision; backends
        with round trips should override it to send the batch in one.
        """
        for decision in decisions:
            check_decision(decision)
        return [
            self.complete(d.lease, d.record)
            if d.retry_delay is None
            else self.retry(d.lease, d.record, d.retry_delay)
            for d in decisions
        ]

    @abc.abstractmethod
    def release(
        self, leases: Sequence[Lease], delay: timedelta = timedelta(0)
    ) -> list[TaskResult | None]:
        """Give back claimed tasks that never started; answers in the order given.

        A worker claims ahead of its free threads (prefetch) and, when it
        shuts down gracefully, releases the leases it never ran. Each task
        whose token is still the lease's and which is still RUNNING goes back
        to the tail of READY (as a zero-delay `retry` would, in the order
        given) and its claim is undone: `attempts` - 1 and the last entry of
        `worker_ids` dropped; when that leaves `attempts` at 0, `started_at`
        and `last_attempted_at` are cleared too (no attempt ever started).
        `errors`, `run_after` and the arguments are kept. The token is
        cleared, as by `requeue`, so any later use of the lease is refused.

        With a `delay` above zero the tasks go to DEFERRED instead, with
        `run_after` = `now() + delay` (rounded up to whole milliseconds, as
        `retry` does), everything else the same: a worker gives back a task
        it may not run (a task it did not load) for another worker, later.
        A delay that is not a `timedelta` of zero or more is a `ValueError`.

        Refused (None) when the token is no longer current, the task is not
        RUNNING, the claim's start was recorded (`mark_started`: a task that
        began to run is never given back), or the lease is a reaper's
        (`claim_expired`: decided, never released); one refusal does not stop
        the others. Atomic per task.

        A task with a cancel request (`cancel_requested_at` set) is given back
        as above (its claim undone, its token cleared) but finalized CANCELLED
        with `finished_at` = `now()` instead of going to READY or DEFERRED.
        """

    def wait_for_tasks(self, queues: Sequence[str], timeout: timedelta) -> bool:
        """Block until a task may have become READY in `queues`, or `timeout` passed.

        Idle workers call this between empty claims instead of spinning. It
        may return early for no reason (callers just claim again), and need
        not notice a DEFERRED task falling due: workers bound `timeout` to
        their polling interval. The default sleeps for `timeout`; backends
        should override it to wake as soon as something is enqueued (a
        condition variable, a blocking server command).

        Returns False only when the whole `timeout` passed with no sign of a
        task in `queues`: nothing that makes a task READY there (`enqueue`,
        `promote_due`, a zero-delay `retry`, `release`, `requeue`) woke it,
        and any look it took found none. True otherwise, and whenever the
        backend cannot tell (the default returns True). A worker whose
        deferred tasks someone else promotes (`promote_due` wakes it) may
        wait again after False instead of claiming, so a backend must not
        return False after a wake-up; a wake-up that is occasionally lost
        only delays a task, since workers claim anyway every so often.
        Callers take anything but False (None from an older override) as True.
        """
        time.sleep(max(timeout.total_seconds(), 0.0))
        return True

    def next_due(self) -> timedelta | None:
        """How long until the earliest DEFERRED task (any queue) falls due, on `now()`'s clock.

        `timedelta(0)` when one is due already (its `run_after` is at or
        before `now()`; never negative), `NOTHING_DEFERRED` when no task is
        DEFERRED, at millisecond resolution. Read-only and a hint: a task
        deferred or promoted a moment later changes the answer, so callers
        plan their next look with it and `promote_due` decides. The
        maintenance loop sleeps until the answer (or its reaper's turn)
        instead of polling.

        The default returns None: this backend cannot tell, and callers look
        every polling interval instead. A backend that can should answer in
        one cheap read (an index of due times): idle supervisors call it
        once per pass.
        """
        return None

    # --- lifecycle -------------------------------------------------------------------

    def close(self) -> None:
        """Release connections and other resources. The default does nothing."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
