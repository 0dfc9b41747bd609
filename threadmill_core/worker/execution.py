"""Running one held task: find it in the registry, call it, and decide what to acknowledge.

`execute` is what a task thread does with a task from the prefetch (a task
given back after an expiry with its start unrecorded has its start recorded
first, `start_first`). The task's own exceptions (any `BaseException`) become
decisions (through its retry policy, by `threadmill_core.retry.decide`).
Nothing is imported on a record's say-so: a task this worker did not load is
never run here (nor marked started first). It is given back for another
worker (`Backend.release` with `UNKNOWN_TASK_DELAY`: uncharged, due again a
few seconds later), as happens during a rolling deploy while some workers
still run the old code; it is quarantined (FAILED with a `TaskQuarantined`
error) only when claimed by a worker that does not know it
`UNKNOWN_TASK_GRACE` or more after its enqueue, on the backend's clock: then
no worker loaded it in all that time.
"""

from __future__ import annotations

import functools
import logging
import time
import traceback
from collections.abc import Coroutine, Mapping
from datetime import timedelta
from typing import Any

import attrs

from threadmill_core import codec, tracing
from threadmill_core.backend import Backend
from threadmill_core.context import TaskContext
from threadmill_core.errors import (
    BackendUnavailable,
    TaskCancelled,
    TaskQuarantined,
    UnsupportedValue,
)
from threadmill_core.models import Decision, Lease, TaskError, TaskResultStatus, evolved
from threadmill_core.plugins import notify
from threadmill_core.retry import decide
from threadmill_core.task import Task, registered_task
from threadmill_core.worker import heartbeat
from threadmill_core.worker.acknowledgement import give_back_leases
from threadmill_core.worker.held import HeldTask
from threadmill_core.worker.interrupts import Attempt, Stop, Watch
from threadmill_core.worker.logs import running_task, task_fields, task_tagging
from threadmill_core.worker.outage import Outage

log = logging.getLogger("threadmill.worker")

QUARANTINE_PATH = f"{TaskQuarantined.__module__}.{TaskQuarantined.__qualname__}"

#: How long after its enqueue a task this worker did not load is given back for
#: another worker; a worker that claims it later, and does not know it either,
#: quarantines it.
UNKNOWN_TASK_GRACE = timedelta(minutes=10)
#: How long a task given back by a worker that did not load it waits (DEFERRED).
UNKNOWN_TASK_DELAY = timedelta(seconds=5)


def execute(
    held: HeldTask,
    *,
    tasks: Mapping[str, Task[Any, Any]] | None,
    backend: Backend,
    outage: Outage,
    lease_ttl: timedelta,
    watch: Watch,
    time_limit: timedelta | None = None,
    grace: float = 0.0,
) -> Decision | None:
    """Run one held task; return the decision to acknowledge, or None to send nothing.

    `tasks` is the worker's registry (None: every task registered in this
    process). A task with a `lease_ttl` of its own other than the worker's
    `lease_ttl` has its lease renewed for it before it starts. None comes
    back when the lease was lost, before the task started or while it ran,
    and when the heartbeat thread abandoned it past its hard limit (it
    decided the attempt itself).

    The attempt runs under `watch` (see `threadmill_core.worker.interrupts`),
    with its time limit: the record's, else the task's, else `time_limit`
    (the worker's), and `grace` seconds from a stop to its hard limit. A
    task whose cancel was requested before it started ends CANCELLED unrun.
    """
    if held.lost:
        log.warning(
            "task %s: lease lost before it started; not run",
            held.lease.task_id, extra=task_fields(held.lease.record),
        )  # fmt: skip
        return None
    lease = held.lease
    record = lease.record
    # One lookup per task: copying the whole registry here would sit on the hot path.
    task = tasks.get(record.task_path) if tasks is not None else registered_task(record.task_path)
    if task is None:
        return unknown(lease, backend=backend, outage=outage)
    if held.cancel_requested:
        log.info("task %s: cancelled before it started; not run", record.id)
        return cancelled(lease, TaskError.from_exception(TaskCancelled()))
    if task.lease_ttl is not None and task.lease_ttl != lease_ttl:
        started = time.monotonic()
        try:
            renewed = backend.extend(lease, task.lease_ttl)
            outage.reached(started)
        except BackendUnavailable as exc:
            # The claim's lease holds for now, and the first heartbeat
            # (within a third of it) renews it for the task's own TTL.
            outage.failed(exc, 1, started)
            renewed = lease
        if renewed is None:
            log.warning(
                "task %s: lease lost before it started; not run", record.id,
                extra=task_fields(record),
            )  # fmt: skip
            return None
        held.lease = lease = renewed
        held.lease_ttl = task.lease_ttl
    # Made only for a task that asks for one: the lease's loss is tracked on
    # `held` (see `HeldTask.mark_lost`), so no one else would read it.
    context = None
    if task.takes_context:
        context = TaskContext(record=record, attempt=record.attempts, token=lease.token)
        held.context = context
    if held.given_back and not start_first(held, backend, outage):
        return None
    held.started = True
    notify("threadmill_task_started", lease=lease)
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "task %s (%s) attempt %d started", record.id, record.task_path, record.attempts,
            extra=task_fields(record),
        )  # fmt: skip
    tagged = task_tagging.on  # what the task logs names it (`--log-format json`)
    if tagged:
        running_task(record)
    limit = record.time_limit or task.time_limit or time_limit
    held.attempt = attempt = Attempt(held, limit, grace)
    if held.cancel_requested:  # heard between the look above and now: see renew_leases
        attempt.pending = Stop.CANCELLED
    run = functools.partial(call, attempt=attempt, watch=watch)
    started = time.monotonic()
    try:
        if tracing.tracer is None:
            decision = run(task, lease, context)
        else:  # the attempt in a CONSUMER span (see threadmill_core.tracing)
            decision = tracing.call_traced(run, task, lease, context)
    finally:
        if tagged:
            running_task(None)
    held.duration = time.monotonic() - started
    if context is not None and context.reported_progress is not held.sent_progress:
        last_progress(held, context, backend, outage)
    if attempt.abandoned:  # past its hard limit: the heartbeat thread decided it
        log.warning(
            "task %s (%s) attempt %d returned after its hard limit; its thread is freed",
            record.id, record.task_path, record.attempts, extra=task_fields(record),
        )  # fmt: skip
        return None
    if held.lost:
        log.warning(
            "task %s (%s) attempt %d finished after its lease was lost; outcome not written",
            record.id, record.task_path, record.attempts, extra=task_fields(record),
        )  # fmt: skip
        return None
    # Still held while the outcome is sent, so that heartbeats keep the
    # lease alive if the backend is unavailable.
    held.acknowledging = True
    return decision


def last_progress(held: HeldTask, context: TaskContext, backend: Backend, outage: Outage) -> None:
    """Send the progress the task reported after the last beat, before its outcome: what it
    said last is kept. An outage loses it (it is only progress), and the outcome goes on."""
    started = time.monotonic()
    try:
        heartbeat.send_progress(backend, [held])
        outage.reached(started)
    except BackendUnavailable as exc:
        outage.failed(exc, 1, started)


def start_first(held: HeldTask, backend: Backend, outage: Outage) -> bool:
    """Record the start of a task given back before (see `Lease.unstarted_expiries`) before
    it runs; whether it may run.

    Such a task may be the one that killed a worker before its start was
    recorded: recorded first, a second kill is charged to it alone (see
    "Given back, then started first" in `threadmill_core.backend`). It does
    not run when the mark is refused (its lease was lost) or cannot be sent
    (the backend is unavailable: unmarked, it goes back uncharged when its
    lease expires).
    """
    started = time.monotonic()
    try:
        [marked] = backend.mark_started([held.lease])
        outage.reached(started)
    except BackendUnavailable as exc:
        outage.failed(exc, 1, started)
        log.warning(
            "task %s: its start could not be recorded before it ran (%s); not run, it goes "
            "back uncharged when its lease expires",
            held.lease.task_id, exc,
        )  # fmt: skip
        return False
    if not marked:
        log.warning("task %s: lease lost before it started; not run", held.lease.task_id)
    return marked


def call(
    task: Task[Any, Any],
    lease: Lease,
    context: TaskContext | None,
    *,
    attempt: Attempt | None = None,
    watch: Watch | None = None,
) -> Decision:
    """Call the task with the record's arguments; its success or its exception as a decision.

    `context` is the one the task takes (None for a task that takes none).
    With `watch`, the task's code runs as `attempt`, which the heartbeat
    thread may stop (see `threadmill_core.worker.interrupts`): whatever the
    task then raises (the stop's own exception, or the `CancelledError` of
    an async task) is recorded as the stop's exception, `TimeLimitExceeded`
    through the retry policy, `TaskCancelled` as CANCELLED, never retried. A
    task that catches the exception and returns keeps its outcome.

    An async task runs to completion in an event loop of its own. A return
    value the codec cannot carry fails the attempt like an exception would.
    Whatever the task raises is its failure, through its retry policy, and
    the worker goes on: `SystemExit` (``sys.exit()`` in a task), a
    `KeyboardInterrupt` the task raises itself, an escaped
    `asyncio.CancelledError`. The worker never raises into task code (a
    signal's `KeyboardInterrupt` reaches the main thread, never a task
    thread), so no exception a task raises is a stop request.
    """
    record = lease.record
    args = [context, *record.args] if task.takes_context else list(record.args)
    try:
        if watch is None or attempt is None:
            value = _run(task, args, record.kwargs)
        else:
            try:
                if task.is_async:
                    value = _run_async(task.func(*args, **record.kwargs), attempt, watch)
                else:
                    watch.enter(attempt, now=time.monotonic())
                    value = task.func(*args, **record.kwargs)
            finally:
                watch.leave(attempt)
        if value is not None:  # what most tasks return, and always carried
            codec.check_value(value, "the return value")
    except UnsupportedValue as exc:
        return decide(lease, TaskError.from_exception(exc))
    except BaseException as exc:  # the task's, every kind of it: see above
        if attempt is not None and attempt.sent is not None:
            if watch is not None:  # the stop may have landed inside `leave`: finish it
                watch.leave(attempt)
            return stopped(lease, attempt, exc, traceback.format_exc())
        return decide(lease, TaskError.from_exception(exc, traceback.format_exc()))
    done = evolved(record, status=TaskResultStatus.SUCCESSFUL, return_value=value)
    return Decision(lease=lease, record=done)


def _run(task: Task[Any, Any], args: list[Any], kwargs: dict[str, Any]) -> Any:
    if task.is_async:
        import asyncio  # only here: a worker of plain functions never loads asyncio

        return asyncio.run(task.func(*args, **kwargs))
    return task.func(*args, **kwargs)


def _run_async(coro: Coroutine[Any, Any, Any], attempt: Attempt, watch: Watch) -> Any:
    """Run an async task's coroutine to completion on a loop of its own, as `attempt`: a
    stop cancels its main task on the loop."""
    import asyncio  # only here: a worker of plain functions never loads asyncio

    async def main() -> Any:
        attempt.main = asyncio.current_task()
        if attempt.sent is not None:  # sent before the main task existed
            raise asyncio.CancelledError
        return await coro

    with asyncio.Runner() as runner:
        attempt.loop = runner.get_loop()  # before `enter`: a stop then goes to the loop
        try:
            watch.enter(attempt, now=time.monotonic())
        except BaseException:
            coro.close()
            raise
        return runner.run(main())


def stopped(lease: Lease, attempt: Attempt, exc: BaseException, trace: str) -> Decision:
    """The decision on an attempt told to stop (`attempt.sent`) that ended raising `exc`."""
    why = attempt.sent
    assert why is not None
    if isinstance(exc, why.error) or type(exc).__name__ == "CancelledError":
        exc = why.error(stop_message(why, attempt))
    error = TaskError.from_exception(exc, trace)
    if why is Stop.CANCELLED:
        return cancelled(lease, error)
    return decide(lease, error)


def stop_message(why: Stop, attempt: Attempt) -> str:
    """What a stopped attempt's error says."""
    if why is Stop.CANCELLED:
        return "the task was cancelled while it ran (a cancel was requested)"
    return f"the attempt ran past its time limit of {attempt.limit}"


def cancelled(lease: Lease, error: TaskError) -> Decision:
    """The decision that finalizes a task stopped at a cancel request CANCELLED, with `error`."""
    record = lease.record
    final = attrs.evolve(record, status=TaskResultStatus.CANCELLED, errors=(*record.errors, error))
    return Decision(lease=lease, record=final)


def unknown(lease: Lease, *, backend: Backend, outage: Outage) -> Decision | None:
    """A task this worker did not load: given back for another worker, or quarantined.

    Given back (`Backend.release`, DEFERRED for `UNKNOWN_TASK_DELAY`, the
    claim undone: no attempt, no error) while the claim came less than
    `UNKNOWN_TASK_GRACE` after the task's enqueue, both on the backend's
    clock; None then, as nothing is left to acknowledge. Past that, the
    decision that quarantines it. A give-back lost in an outage leaves the
    lease to lapse, and an unstarted claim that lapses goes back uncharged.
    """
    record = lease.record
    # Both on the backend's clock, set by its claim and its enqueue (never None here).
    claimed, enqueued = record.last_attempted_at, record.enqueued_at
    if claimed is None or enqueued is None or claimed - enqueued >= UNKNOWN_TASK_GRACE:
        return quarantine(
            lease,
            f"task {record.task_path} is not registered: no worker that claimed it in the "
            f"{UNKNOWN_TASK_GRACE} after its enqueue had loaded it",
        )
    started = time.monotonic()
    try:
        [back] = give_back_leases(backend, [lease], UNKNOWN_TASK_DELAY)
        outage.reached(started)
    except BackendUnavailable as exc:
        outage.failed(exc, 1, started)
        log.warning(
            "task %s (%s) is not registered here; the backend is unavailable, so its lease "
            "lapses and it goes back uncharged", record.id, record.task_path,
            extra=task_fields(record),
        )  # fmt: skip
        return None
    if back is not None:
        log.warning(
            "task %s (%s) is not registered here: given back for another worker, due in %s, "
            "uncharged (quarantined if still unknown %s after its enqueue)",
            record.id, record.task_path, UNKNOWN_TASK_DELAY, UNKNOWN_TASK_GRACE,
            extra=task_fields(record),
        )  # fmt: skip
    return None


def quarantine(lease: Lease, why: str) -> Decision:
    """The decision that finalizes a task the worker may not run FAILED, saying `why`."""
    record = lease.record
    error = TaskError(exception_class_path=QUARANTINE_PATH, message=why)
    failed = attrs.evolve(record, status=TaskResultStatus.FAILED, errors=(*record.errors, error))
    log.error("task %s quarantined as FAILED: %s", record.id, why, extra=task_fields(record))
    return Decision(lease=lease, record=failed)
