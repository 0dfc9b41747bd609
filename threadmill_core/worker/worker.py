"""`Worker`: claims, runs and acknowledges tasks in this process.

::

    worker = Worker(broker, queues=["default"], threads=4)
    worker.run(burst=True)   # returns once nothing is ready or running

A worker runs only tasks registered in its task registry (by default every
``@task`` imported in this process). A record naming any other path is
finalized FAILED with a `TaskQuarantined` error and nothing is imported on
the record's say-so (see `threadmill_core.worker.execution`).

Heartbeats: a daemon thread renews the leases of every held task in one
`extend_many` call each `lease_ttl / 3`. When a renewal is refused the lease
was taken away: the task's `TaskContext.lease_lost` turns true and its
outcome is not written (see `threadmill_core.worker.heartbeat`). Each beat also
refreshes the worker's live entry (`threadmill_core.worker.presence`), which `run`
makes as it begins and removes as it returns. The same thread
records which tasks started (`Backend.mark_started`, one call for every
task that has run `scheduler.MARK_DELAY` without an outcome), so that a
task claimed but never started (prefetched) is never charged when its
worker dies: the reaper gives it back uncharged. A task decided within the
delay is never marked (its decision implies its start), so a drain of
short tasks makes no extra call. It also sends the outcomes that have
waited `scheduler.ACK_DELAY` while every task thread runs a task: with one
thread in a long task, the outcome of the one before it lands within that
delay, not when the long one ends.

Stopping: `stop()` (a first signal) gives back the prefetch at once and
lets the running tasks finish and be acknowledged. `stop_now()` (a second
signal, a shutdown timeout) gives back the prefetch, sends the outcomes
waiting for their batch, and abandons the running tasks, each logged with
what becomes of it.

With ``maintenance=True`` (the default) the thread that calls `run` runs
the reaper and the mover every `poll_interval` (the first pass before any
claim), so a single in-process worker is a complete queue. The task threads
do everything else themselves: there is no dispatcher thread between the
backend and the tasks (see `Worker.run`).

Outages: a backend call that raises `BackendUnavailable` (Redis restarting,
a dropped connection) never kills the worker. Each loop backs off
exponentially (`reconnect_backoff`) and tries again; the process logs one
warning when the backend goes away and one line when it is back (see
`threadmill_core.worker.outage.Outage`). An acknowledgement is never dropped: it is
sent again with the same lease until the backend answers, which it does as
the first time if an earlier send was applied but its reply lost; meanwhile
the task stays among the held ones, so heartbeats keep its lease alive.

The parts: `threadmill_core.worker.scheduler` chooses each task thread's next
step, `threadmill_core.worker.upkeep` the heartbeat thread's (marks, outcomes left
waiting, a stopping worker's prefetch), `threadmill_core.worker.execution` runs one task,
`threadmill_core.worker.acknowledgement` sends outcomes, `threadmill_core.worker.heartbeat`
renews leases; `threadmill_core.worker.steps` applies the threads' steps; this module
starts the threads.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from threadmill_core.broker import Broker, worker_made
from threadmill_core.errors import BackendUnavailable, PayloadError
from threadmill_core.models import TaskResultStatus, validate_timedelta
from threadmill_core.plugins import notify
from threadmill_core.retry import ExponentialBackoff
from threadmill_core.task import Task, registered_tasks, validate_queue, validate_time_limit
from threadmill_core.worker import heartbeat, prefetch_window, scheduler, upkeep
from threadmill_core.worker.acknowledgement import give_back_leases, send_outcomes
from threadmill_core.worker.held import HeldTasks
from threadmill_core.worker.interrupts import HARD_LIMIT_GRACE
from threadmill_core.worker.maintenance import promote, reap
from threadmill_core.worker.outage import RECONNECT_BACKOFF, Outage
from threadmill_core.worker.presence import Presence
from threadmill_core.worker.steps import TaskThreads, WorkerRun

log = logging.getLogger("threadmill.worker")


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def _log_abandoned(entry: scheduler.Running, now: float) -> None:
    """Say what becomes of a task a forced stop abandoned while it ran."""
    held = entry.task
    record = held.lease.record
    if entry.marked:
        log.warning(
            "task %s (%s) attempt %d abandoned while running: its lease expires within %s, "
            "then its retry policy decides (an AcknowledgementTimeout)",
            record.id, record.task_path, record.attempts, held.lease_ttl,
        )  # fmt: skip
    else:
        log.warning(
            "task %s (%s) attempt %d abandoned %.3f s after it started, before its start was "
            "recorded: once its lease expires (within %s) it goes back to READY uncharged",
            record.id, record.task_path, record.attempts, now - entry.since, held.lease_ttl,
        )  # fmt: skip


class Worker(TaskThreads):
    """Claims tasks from `queues` (in that order of preference) and runs them on `threads` threads.

    `prefetch` is how many tasks the worker may hold beyond its threads,
    claimed ahead so a thread that finishes starts the next task without a
    round trip. None (the default) sizes it as the worker goes
    (`threadmill_core.worker.prefetch_window`): from `threads` at the start
    of each `run`, up to `prefetch_window.CEILING` while tasks are short
    against a claim's round trip and the queue has more, down to none
    beyond the threads when they are long, so that they are not hoarded:
    once ``threads + 1`` slow runs in a row have shrunk the room to half of
    the prefetched tasks or less, those beyond it are given back at once,
    newest first, uncharged (`prefetch_window.excess`). An int fixes it
    (and never gives back while running). Prefetched tasks are claimed
    (their leases renewed by the heartbeat); a stop gives back the ones not
    started (`Backend.release`), and a killed worker's lapse and go back to
    READY uncharged (no attempt, no error: they never started), while the
    tasks it was running meet their retry policy. Claims
    and acknowledgements go in batches: one `claim` refills the prefetch
    once it is half empty (with one thread, once it is empty: see
    `scheduler.Settings.for_worker`), and outcomes are sent together in one
    `decide_many` once `scheduler.ACK_BATCH` (or ``threads + prefetch``, if
    more) have gathered, the oldest has waited `scheduler.ACK_DELAY`, a
    claim is due, or nothing is left to run. A task is held, and its lease
    renewed, until its outcome is acknowledged, so batching never weakens
    at-least-once.

    `lease_ttl` is how long a claim lives without a heartbeat (a task's own
    ``lease_ttl`` option overrides it). `poll_interval` is the maintenance
    interval (``maintenance=True``) and the longest single idle wait, so it
    bounds how long `stop()` takes to be noticed; without maintenance, an
    idle worker waits through quiet intervals until it is woken or the next
    deferred task falls due (see `_idle_wait`). `tasks` is the registry of
    tasks this worker may run, by path; by default, every task registered in
    this process. `reconnect_backoff` spaces out the attempts to reach a
    backend that is unavailable (its `max_retries` is ignored: the worker
    never gives up on the backend).

    `time_limit` is the longest one attempt of a task may run when neither
    its record nor its task sets one (``@task(time_limit=...)``,
    `Task.using`); None, the default: no limit. Past it,
    `threadmill_core.TimeLimitExceeded` is raised inside the task. One that
    has not stopped `time_limit_grace` later (blocked in C code) is beyond
    reach: it is recorded FAILED (or retried, by its retry policy), its
    thread is abandoned and listed in `stuck_threads`, and the worker stops
    as `stop()` does: it claims nothing more, gives back its prefetch
    uncharged, lets its other tasks finish, and `run` returns. A caller that
    finds `stuck_threads` should end the process (``threadmill worker``
    exits with `EXIT_REPLACE`, and its supervisor starts a fresh one). The
    same goes for a running task told to stop by a cancel request
    (`threadmill_core.Broker.cancel`): see `threadmill_core.worker.interrupts`.
    """

    def __init__(
        self,
        broker: Broker,
        *,
        queues: Sequence[str] = ("default",),
        threads: int = 1,
        prefetch: int | None = None,
        lease_ttl: timedelta | float = timedelta(seconds=30),
        poll_interval: timedelta | float = timedelta(seconds=1),
        maintenance: bool = True,
        worker_id: str | None = None,
        tasks: Mapping[str, Task[Any, Any]] | None = None,
        reconnect_backoff: ExponentialBackoff = RECONNECT_BACKOFF,
        time_limit: timedelta | float | None = None,
        time_limit_grace: timedelta | float = HARD_LIMIT_GRACE,
    ) -> None:
        if isinstance(queues, str):
            queues = [queues]
        if not queues:
            raise ValueError("a worker needs at least one queue")
        self.queues = [validate_queue(q) for q in queues]
        if type(threads) is not int or threads < 1:
            raise ValueError(f"threads must be an int >= 1, got {threads!r}")
        if prefetch is not None and (type(prefetch) is not int or prefetch < 0):
            raise ValueError(f"prefetch must be an int >= 0, got {prefetch!r}")
        self.broker = broker
        worker_made()  # a memory:// default broker has a consumer here: no warning
        self.backend = broker.backend
        self.threads = threads
        #: The fixed prefetch; None: adaptive.
        self.prefetch = prefetch
        self.lease_ttl = validate_timedelta("lease_ttl", lease_ttl)
        self.poll_interval = validate_timedelta("poll_interval", poll_interval)
        self.time_limit = validate_time_limit(time_limit)
        self.time_limit_grace = validate_timedelta("time_limit_grace", time_limit_grace)
        #: Task threads abandoned past a hard limit (see the class docstring).
        self.stuck_threads: list[threading.Thread] = []
        self.maintenance = maintenance
        self.worker_id = worker_id or default_worker_id()
        self._tasks = dict(tasks) if tasks is not None else None
        #: Every task held: prefetched, running, or being acknowledged or given back.
        self._held = HeldTasks()
        #: This worker's live entry (`threadmill_core.worker.presence`), for `threadmill workers`.
        self._presence = Presence(
            self.backend, self._held, worker_id=self.worker_id, queues=self.queues,
            threads=threads, ttl=self.lease_ttl,
        )  # fmt: skip
        #: Guards the current `_Run`; task threads wait on `_cond` for work.
        #: Taken as ``with self._lock``, the condition's own lock, which is
        #: reentrant so that `stop()` is safe from a signal handler in any thread.
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._current = self._new_run(burst=False, max_tasks=None)
        self._stop = threading.Event()
        self.processed = 0
        #: Shared by every loop of this worker, so an outage is logged once.
        self.outage = Outage(log, reconnect_backoff)

    def _new_run(self, *, burst: bool, max_tasks: int | None) -> WorkerRun:
        """A run's state; with an adaptive prefetch, its window starts afresh."""
        window = None if self.prefetch is not None else prefetch_window.Window.start(self.threads)
        settings = scheduler.Settings.for_worker(
            threads=self.threads,
            prefetch=window.size if window is not None else self.prefetch or 0,
            poll=self.poll_interval.total_seconds(),
            burst=burst,
            max_tasks=max_tasks,
        )
        return WorkerRun(settings, window=window)

    # --- the loop ------------------------------------------------------------------------

    def tasks(self) -> Mapping[str, Task[Any, Any]]:
        return self._tasks if self._tasks is not None else registered_tasks()

    def census(self) -> tuple[int, int]:
        """How many held tasks wait in the prefetch, and how many run now (the current run's)."""
        with self._lock:
            schedule = self._current.schedule
            return len(schedule.ready), len(schedule.running)

    @property
    def stopping(self) -> bool:
        """True once `stop()` was called and `run` is draining."""
        return self._stop.is_set()

    def stop(self) -> None:
        """Stop claiming; `run` gives back the prefetch at once and returns once the running
        tasks are acknowledged."""
        self._stop.set()
        with self._lock:  # reentrant: safe from a signal handler in any thread
            self._cond.notify_all()
            self._current.wake_upkeep.set()  # the prefetch goes back even if no thread is free

    def stop_now(self) -> list[str]:
        """Stop at once (a second signal, a shutdown timeout); the ids of the running tasks
        abandoned. Safe from a signal handler in any thread.

        What two calls can save is saved first: the prefetched tasks that
        never started go back to READY (one `release`), and outcomes waiting
        for their batch are sent (one `decide_many`); each call is made once,
        and one that fails is logged with what happens instead. Then the
        running tasks are abandoned: nothing more is claimed, acknowledged or
        renewed, and each is logged with what happens to it next (its lease
        expires, and the reaper charges it through its retry policy, or gives
        it back uncharged if its start was never recorded). Threads cannot be
        killed: the caller exits the process (`threadmill worker` does), or
        the running tasks run on, their outcomes unsent.
        """
        self._stop.set()
        run = self._current
        with self._lock:
            stop, run.schedule = upkeep.forced_stop(run.schedule)
            self._cond.notify_all()
        run.done_beating.set()
        run.wake_upkeep.set()
        live = [held for held in stop.give_back if not held.lost]
        if live:
            try:
                given = give_back_leases(self.backend, [held.lease for held in live])
            except Exception as exc:  # one try: the process is about to exit
                log.warning(
                    "could not give back %d prefetched task(s) (%s: %s); they go back to READY "
                    "uncharged once their leases expire", len(live), type(exc).__name__, exc,
                )  # fmt: skip
            else:
                back = sum(record is not None for record in given)
                log.warning("stopping now: gave back %d prefetched task(s) not started", back)
        self._held.forget_all(stop.give_back)
        if stop.outcomes:
            try:
                self._count_processed(send_outcomes(self.backend, stop.outcomes, self._held))
            except Exception as exc:
                log.warning(
                    "could not send the outcomes of %d finished task(s) (%s: %s); their leases "
                    "will expire and the reaper decide", len(stop.outcomes), type(exc).__name__,
                    exc,
                )  # fmt: skip
        self._presence.leave()  # the process is about to exit: no longer a live worker
        now = time.monotonic()
        for entry in stop.running:
            _log_abandoned(entry, now)
        return [entry.task.lease.task_id for entry in stop.running]

    def run(self, *, burst: bool = False, max_tasks: int | None = None) -> int:
        """Work until `stop()`; returns how many tasks this call ran to an outcome.

        With `burst`, return once nothing is ready or held and no DEFERRED
        task of `queues` falls due within `poll_interval` (one that does is
        waited for and run, so a quick retry runs on time). With
        `max_tasks`, stop claiming after that many claims (a supervisor then
        recycles the process). Either way, tasks already running are finished
        and acknowledged before `run` returns, with their heartbeats going on,
        and prefetched tasks not started are given back.

        There is no dispatcher thread: each task thread takes the next step
        itself, as `scheduler.next_step` chooses it: send the
        acknowledgements that are due, refill the prefetch, run a task, or
        wait. With one thread, claims, acknowledgements and tasks follow each
        other in that thread, and no task waits on a hand-over between
        threads. This thread runs the maintenance passes, if any, and waits.

        A `stop()` that came before `run` (a signal while a worker process
        was starting) is not forgotten: `run` then claims nothing and returns
        at once. The stop is cleared as `run` returns, so a later `run` works;
        one that raised (an error of the worker's own) stays stopped.
        """
        processed_before = self.processed
        looked_at: datetime | None = None  # the backend's time when a burst last waited
        self._presence.arrive(self.outage)
        try:
            while True:
                claimed = self._run_threads(burst=burst, max_tasks=max_tasks)
                if not burst or self._stop.is_set():
                    break
                if max_tasks is not None:
                    max_tasks -= claimed
                    if max_tasks <= 0:
                        break
                again, looked_at = self._wait_for_due_task(looked_at)
                if not again:
                    break
        finally:
            self._presence.leave()
        self._stop.clear()
        return self.processed - processed_before

    def _run_threads(self, *, burst: bool, max_tasks: int | None) -> int:
        """One run of the task threads, to their exit; how many tasks they claimed."""
        run = self._current = self._new_run(burst=burst, max_tasks=max_tasks)
        heartbeats = threading.Thread(
            target=heartbeat.upkeep_until,
            args=(
                run.done_beating,
                run.wake_upkeep,
                self._beat,
                self._beat_interval,
                functools.partial(self._upkeep, run),
                self.outage,
            ),
            name=f"threadmill-heartbeat-{self.worker_id}",
            daemon=True,
        )
        runners = [
            threading.Thread(target=self._task_thread, name=f"threadmill-task-{n}", daemon=True)
            for n in range(self.threads)
        ]
        heartbeats.start()
        try:
            poll = self.poll_interval.total_seconds()
            # The first pass comes before any claim: what is due is promoted first.
            next_maintenance = self._maintain(0) if self.maintenance else float("inf")
            for runner in runners:
                runner.start()
            # Until `finished`, not while some thread is_alive(): the last thread sets the
            # event a moment before it exits, and a wait on a set event returns at once.
            while not run.finished.is_set():
                if time.monotonic() >= next_maintenance and not self._stop.is_set():
                    next_maintenance = self._maintain(poll)
                    with self._lock:  # promoted tasks may be ready: look again
                        run.schedule = scheduler.look_again(run.schedule)
                        self._cond.notify_all()
                run.finished.wait(min(max(next_maintenance - time.monotonic(), 0.0), poll))
                notify("threadmill_worker_ticked", worker=self)  # at least every poll
        except BaseException:
            self.stop()  # our own bug, or KeyboardInterrupt here: the threads drain and exit
            raise
        finally:
            try:
                for runner in runners:
                    if runner.is_alive() and runner not in run.stuck:
                        runner.join()
            except BaseException:
                self.stop_now()  # a second KeyboardInterrupt while tasks finish: stop now
                raise
            run.done_beating.set()
            run.wake_upkeep.set()
            heartbeats.join()
        if run.error is not None:
            raise run.error
        return run.schedule.calls.claimed

    def _wait_for_due_task(self, looked_at: datetime | None) -> tuple[bool, datetime | None]:
        """A burst found nothing: wait for a DEFERRED task of our queues due within
        `poll_interval`, if there is one. Returns whether to burst again, and the
        backend's time when it last waited for a task. The burst ends when nothing
        is due so soon, on `stop()`, or when the backend's clock has not moved since
        the last wait (`looked_at`): a fake clock that a test advances by hand.

        A retry deferred for 0.1 s is work about to be ready, not work for
        another day: the burst waits until it is due and claims again (the
        claim promotes it), rather than exit and leave it to a mover. One
        `next_due` call settles the common case (nothing deferred, or not
        soon); only then are our queues' first DEFERRED tasks looked at.
        During an outage, the backoff is waited and the burst looks again.
        """
        poll = self.poll_interval
        started = time.monotonic()
        try:
            due = self.backend.next_due()
            if due is not None and due > poll:
                return False, looked_at  # NOTHING_DEFERRED included
            now = self.backend.now()
            firsts = [
                first.run_after
                for queue in self.queues
                for first in self.backend.peek(queue, TaskResultStatus.DEFERRED, limit=1)
                if first.run_after is not None
            ]
        except BackendUnavailable as exc:
            return not self._stop.wait(self.outage.failed(exc, 1, started)), looked_at
        except PayloadError:  # poison first in line: its due time is unknown
            return False, looked_at
        self.outage.reached(started)
        if not firsts or min(firsts) - now > poll or (looked_at is not None and now <= looked_at):
            return False, looked_at
        wait = max((min(firsts) - now).total_seconds(), 0.0)
        log.debug("burst: a deferred task falls due in %.3f s; waiting for it", wait)
        return not self._stop.wait(wait), now

    def _maintain(self, poll: float) -> float:
        """Maintenance passes until one gets through (or `stop()`); when the next is due."""
        failures = 0
        while True:
            started = time.monotonic()
            try:
                self.run_maintenance()
            except BackendUnavailable as exc:
                failures += 1
                if self._stop.wait(self.outage.failed(exc, failures, started)):
                    return float("inf")
                continue
            self.outage.reached(started)
            return time.monotonic() + poll

    def run_maintenance(self) -> None:
        """One reaper pass and one mover pass; `BackendUnavailable` goes to the caller."""
        reap(self.backend, claim_ttl=self.lease_ttl)
        promote(self.backend)

    # --- heartbeats ----------------------------------------------------------------------

    def heartbeat(self) -> None:
        """Renew the leases of every held task, one `extend_many` call per lease TTL.

        A renewal that is refused means the lease was taken away: a running
        task's context says so and its outcome will not be written; a
        prefetched one will not start. An unavailable backend is noted in
        `outage`; the heartbeat thread tries again soon.
        """
        heartbeat.beat_once(self._beat, self.outage)

    def _beat(self) -> None:
        heartbeat.renew_leases(self.backend, self._held, self.outage, self._current.watch)
        heartbeat.send_progress(self.backend, self._held.all())
        self._presence.refresh()  # one write a beat: the leases first, they matter more

    def _beat_interval(self) -> float:
        return heartbeat.beat_interval(self.lease_ttl, self._held)
