"""Heartbeats: renewing the lease of every task a worker holds, before it lapses.

A worker's heartbeat thread calls `renew_leases` every third of the
shortest lease TTL it holds (`beat_interval`): one `extend_many` call per
TTL, for every task held, prefetched ones included. Task code cannot starve
it (it holds no lock a task can hold). A refused renewal means the lease
was taken away (a reaper decided the task, or an operator acted): the task
is marked `lost`. A running task's outcome is then not written (and its
`TaskContext.lease_lost` turns true, if it takes one); a prefetched task
never starts.

The same thread does the rest of a worker's upkeep between beats
(`upkeep_until`): it records the starts of tasks that have run a moment
(`Backend.mark_started`, in batches), sends the outcomes that have waited
their delay while every task thread runs a task, and gives a stopping
worker's prefetch back; the scheduler says when
(`threadmill_core.worker.upkeep.next_upkeep`). Each beat also refreshes the
worker's live entry, one write (`threadmill_core.worker.presence`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta

from threadmill_core.backend import Backend
from threadmill_core.errors import BackendUnavailable
from threadmill_core.models import Progress
from threadmill_core.worker.held import HeldTask, HeldTasks
from threadmill_core.worker.interrupts import Stop, Watch
from threadmill_core.worker.outage import Outage

log = logging.getLogger("threadmill.worker")


def renew_leases(
    backend: Backend, held: HeldTasks, outage: Outage, watch: Watch | None = None
) -> None:
    """Renew every lease in `held`, one `extend_many` per lease TTL; `BackendUnavailable` raises.

    A task acknowledged while its renewal was on the way is left alone: its
    refusal means the outcome landed. A renewal that says a cancel was
    requested (`Lease.cancel_requested`) is heard once: the task's context
    says so, and a running task is stopped (`watch`, see
    `threadmill_core.worker.interrupts`); one not started yet ends unrun.
    """
    by_ttl: dict[timedelta, list[HeldTask]] = {}
    for task in held.all():
        by_ttl.setdefault(task.lease_ttl, []).append(task)
    for ttl, tasks in by_ttl.items():
        started = time.monotonic()
        renewed = backend.extend_many([task.lease for task in tasks], ttl)
        outage.reached(started)
        still_held = {id(task) for task in held.all()}
        for task, lease in zip(tasks, renewed, strict=True):
            if id(task) not in still_held:
                continue  # finished meanwhile: a refusal then means it was acknowledged
            if lease is not None:
                task.lease = lease
                if lease.cancel_requested and not task.cancel_requested:
                    cancel_requested(task, watch)
            elif not task.started:
                task.mark_lost()  # it will not start
            elif not task.acknowledging and not task.lost:
                task.mark_lost()
                log.warning(
                    "task %s lost its lease (reaped or changed by an operator); "
                    "its outcome will not be written",
                    task.lease.task_id,
                )


def send_progress(backend: Backend, tasks: list[HeldTask]) -> None:
    """Send the progress that running `tasks` reported since it was last sent, in one
    `record_progress` call (none if nothing changed); `BackendUnavailable` raises.

    A refusal means the lease is lost: the renewals say so, not this.
    """
    updates: list[tuple[HeldTask, Progress]] = []
    for task in tasks:
        context = task.context
        if context is None or task.lost or not task.started:
            continue
        progress = context.reported_progress
        if progress is not None and progress is not task.sent_progress:
            updates.append((task, progress))
    if not updates:
        return
    backend.record_progress([(task.lease, progress) for task, progress in updates])
    for task, progress in updates:
        task.sent_progress = progress


def cancel_requested(task: HeldTask, watch: Watch | None) -> None:
    """A renewal said that `task`'s cancel was requested: tell its context, stop its attempt."""
    task.cancel_requested = True  # before reading `attempt`: see `execution.execute`
    log.info("task %s: cancel requested; stopping it", task.lease.task_id)
    if task.context is not None:
        task.context.mark_cancel_requested()
    attempt = task.attempt
    if attempt is not None and watch is not None:
        watch.stop(attempt, Stop.CANCELLED)


def refused_marks(tasks: list[HeldTask], held: HeldTasks) -> None:
    """Start marks the backend refused (see `Backend.mark_started`): a task still held and
    running lost its lease, and its context says so; any other had its outcome land first."""
    still_held = {id(task) for task in held.all()}
    for task in tasks:
        if id(task) not in still_held or task.acknowledging or not task.started:
            continue
        if not task.lost:
            task.mark_lost()
            log.warning(
                "task %s lost its lease before its start was recorded (reaped or changed by an "
                "operator); its outcome will not be written",
                task.lease.task_id,
            )


def beat_interval(lease_ttl: timedelta, held: HeldTasks) -> float:
    """Seconds between beats: a third of the shortest of `lease_ttl` and the TTLs held."""
    return min([lease_ttl, *held.lease_ttls()]).total_seconds() / 3


def beat_once(beat: Callable[[], None], outage: Outage) -> None:
    """Run `beat` once; an unavailable backend is noted in `outage`, any other error logged."""
    started = time.monotonic()
    try:
        beat()
    except BackendUnavailable as exc:
        outage.failed(exc, 1, started)
    except Exception:
        log.exception("heartbeat failed; retrying at the next beat")


def upkeep_until(
    done: threading.Event,
    wake: threading.Event,
    beat: Callable[[], None],
    interval: Callable[[], float],
    upkeep: Callable[[], float | None],
    outage: Outage,
) -> None:
    """The heartbeat thread: `beat` every `interval()` seconds and the rest of the upkeep in
    between, until `done` is set (set `wake` too, to end a wait at once).

    `upkeep()` takes the next upkeep step if one is due (a batch of start
    marks, outcomes past their delay, or a stopping worker's prefetch given
    back; see `threadmill_core.worker.upkeep.next_upkeep`) and answers how many
    seconds until the next may be due, or None when none is: then the thread
    waits for its next beat, or until `wake` is set (a start that needs it
    sets it). While the backend is unavailable the beats come sooner, at the
    outage's backoff, since the leases run out meanwhile. Any other error is
    logged and the thread goes on as usual.
    """
    failures = 0
    next_beat = time.monotonic() + interval()
    while not done.is_set():
        try:
            due_in = upkeep()
        except Exception:
            log.exception("heartbeat thread: upkeep failed; trying again at the next beat")
            due_in = None
        now = time.monotonic()
        if now >= next_beat:
            pause = interval()
            try:
                beat()
                failures = 0
            except BackendUnavailable as exc:
                failures += 1
                pause = min(pause, outage.failed(exc, failures, now))
            except Exception:
                log.exception("heartbeat failed; retrying at the next beat")
            next_beat = time.monotonic() + pause
            continue
        timeout = next_beat - now if due_in is None else min(due_in, next_beat - now)
        if wake.wait(timeout):
            wake.clear()
