"""A worker's task threads and heartbeat thread: each asks the scheduler, takes the step, tells it.

`TaskThreads` is the half of `threadmill_core.worker.worker.Worker` that
applies the steps `threadmill_core.worker.scheduler` (task threads) and
`threadmill_core.worker.upkeep` (the heartbeat thread) choose: a claim, an
acknowledgement, a start mark, a release, a task run, an idle wait. Each
step's backend call goes through `_call_backend`, which turns an outage into
a backoff and anything else into a stopped worker. `WorkerRun` is the state
of one call of `Worker.run` that these steps share.

With an adaptive prefetch (`WorkerRun.window`), each task's run time
(`prefetch_window.observe_run`) and each claim's round trip, with how many
tasks it asked for and got (`observe_claim`), are observed on
`time.monotonic()`, and the run's settings follow the window's room
(`scheduler.Settings.resized`); after each run, the prefetched tasks the
window no longer holds (`prefetch_window.excess`) are given back
(`scheduler.give_back`, then a `Release`).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, assert_never

import attrs

from threadmill_core.backend import NOTHING_DEFERRED, Backend
from threadmill_core.errors import BackendUnavailable
from threadmill_core.models import Decision, Lease, TaskError
from threadmill_core.retry import decide
from threadmill_core.worker import heartbeat, prefetch_window, scheduler, upkeep
from threadmill_core.worker.acknowledgement import give_back_leases, send_outcomes
from threadmill_core.worker.execution import cancelled, execute, stop_message
from threadmill_core.worker.held import HeldTask, HeldTasks, Outcome
from threadmill_core.worker.interrupts import Attempt, Stop, Watch
from threadmill_core.worker.outage import Outage

if TYPE_CHECKING:
    from threadmill_core.task import Task

log = logging.getLogger("threadmill.worker")

#: A worker without its own maintenance claims after this many idle waits in
#: a row that ended quietly (no wake-up), however quiet: a wake-up is a hint
#: and may be lost. With the default 1 s poll interval, once every 30 s.
QUIET_WAITS_PER_CLAIM = 30


@attrs.define(eq=False)
class WorkerRun:
    """One call of `Worker.run`: its threads' schedule, and how they ended.

    `schedule` is replaced (never changed in place) under the worker's lock.
    """

    settings: scheduler.Settings
    schedule: scheduler.Schedule = attrs.Factory(scheduler.Schedule)
    #: Task threads that have exited; `finished` is set once all have.
    exited: int = 0
    finished: threading.Event = attrs.Factory(threading.Event)
    #: Wakes the heartbeat thread for its upkeep (a start to mark, outcomes, a stop).
    wake_upkeep: threading.Event = attrs.Factory(threading.Event)
    #: Ends the heartbeat thread (set `wake_upkeep` too).
    done_beating: threading.Event = attrs.Factory(threading.Event)
    #: What broke a task thread (our own bug, not a task's error), raised by `run`.
    error: BaseException | None = None
    #: The adaptive prefetch, which `settings` follows; None: a fixed one.
    window: prefetch_window.Window | None = None
    #: The running attempts that a time limit or a cancel may stop.
    watch: Watch = attrs.field(init=False)
    #: Task threads abandoned past a hard limit, still in their task's code; the run
    #: ends once every other thread has exited.
    stuck: set[threading.Thread] = attrs.Factory(set)

    def __attrs_post_init__(self) -> None:
        self.watch = Watch(self.wake_upkeep)

    def thread_ended(self, threads: int) -> None:
        """One more task thread exited, or was abandoned (under the worker's lock)."""
        if self.exited + len(self.stuck) >= threads:
            self.finished.set()


def _stack_of(thread: threading.Thread) -> str:
    """Where `thread` is now, as a formatted stack (empty if it has ended)."""
    frame = sys._current_frames().get(thread.ident or 0)
    return "" if frame is None else "".join(traceback.format_stack(frame))


def _fate(decision: Decision) -> str:
    if decision.retry_delay is not None:
        return f"retried in {decision.retry_delay}"
    return decision.record.status.value


class TaskThreads:
    """The steps of a `Worker`'s task threads and heartbeat thread (see the module docstring).

    The attributes are the `Worker`'s, set by its ``__init__``.
    """

    backend: Backend
    queues: list[str]
    worker_id: str
    threads: int
    lease_ttl: timedelta
    time_limit: timedelta | None
    time_limit_grace: timedelta
    poll_interval: timedelta
    maintenance: bool
    processed: int
    outage: Outage
    _tasks: Mapping[str, Task[Any, Any]] | None
    _held: HeldTasks
    _lock: threading.RLock
    _cond: threading.Condition
    _stop: threading.Event
    _current: WorkerRun
    #: Task threads abandoned past a hard limit (see `Worker.stuck_threads`).
    stuck_threads: list[threading.Thread]

    def stop(self) -> None:
        """`Worker.stop`."""
        raise NotImplementedError

    # --- a task thread: ask the scheduler, take the step, tell the scheduler -------------

    def _task_thread(self) -> None:
        run = self._current
        try:
            while True:
                step = self._next_step(run)
                match step:
                    case scheduler.Run(task=held, wake_upkeep=wake):
                        if wake:  # the heartbeat thread would look too late
                            run.wake_upkeep.set()
                        if not self._run_task(run, held):
                            return  # abandoned past its hard limit: this thread is done
                    case scheduler.Acknowledge(outcomes=outcomes):
                        self._acknowledge(run, outcomes)
                    case scheduler.Claim(limit=limit):
                        self._claim(run, limit)
                    case scheduler.Release(tasks=tasks):
                        self._release(run, tasks)
                    case scheduler.IdleWait():
                        self._idle(run)
                    case scheduler.Exit():
                        return
                    case _:  # mypy checks that every kind of step is handled above
                        assert_never(step)
        except BaseException as exc:
            # Our own bug (a task's exceptions, SystemExit included, are its
            # failures): the others stop gracefully (the prefetch given back,
            # outcomes acknowledged), and `run` raises it.
            log.exception("a worker thread failed; stopping the worker")
            self._failed(run, exc)
        finally:
            with self._lock:
                run.stuck.discard(threading.current_thread())
                run.exited += 1
                run.thread_ended(self.threads)
                self._cond.notify_all()

    def _next_step(self, run: WorkerRun) -> scheduler.Action:
        """The scheduler's next step for this thread, after the waits it asks for."""
        with self._lock:
            while True:
                step, run.schedule = scheduler.next_step(
                    run.schedule,
                    run.settings,
                    now=time.monotonic(),
                    stopping=self._stop.is_set(),
                    held=len(self._held),
                )
                if not isinstance(step, scheduler.Wait):
                    if isinstance(step, scheduler.Exit):
                        self._cond.notify_all()  # the run is over for every thread
                    return step
                self._cond.wait(step.seconds)

    def _failed(self, run: WorkerRun, exc: BaseException) -> None:
        with self._lock:
            if run.error is None:
                run.error = exc
        self.stop()

    def _call_backend(self, run: WorkerRun, call: Callable[[], Any]) -> bool:
        """Make one backend call of a step; False if it did not get through.

        An unavailable backend means a backoff before the next call. Any other
        error is our own bug: logged, the worker stops, and `run` raises it.
        """
        started = time.monotonic()
        try:
            call()
        except BackendUnavailable as exc:
            with self._lock:
                attempt = run.schedule.calls.failures + 1
                retry_at = time.monotonic() + self.outage.failed(exc, attempt, started)
                run.schedule = scheduler.backend_unavailable(run.schedule, retry_at=retry_at)
            return False
        except Exception as exc:
            log.exception("a call to the backend failed unexpectedly; stopping the worker")
            self._failed(run, exc)
            return False
        self.outage.reached(started)
        with self._lock:
            run.schedule = scheduler.backend_reached(run.schedule)
        return True

    def _adapt(self, run: WorkerRun, window: prefetch_window.Window) -> None:
        """Keep `window` and size the run's room by it; under the lock."""
        run.window = window
        if prefetch_window.capacity(window) != run.settings.capacity:
            run.settings = run.settings.resized(threads=self.threads, prefetch=window.size)

    def _claim(self, run: WorkerRun, limit: int) -> None:
        leases: list[Lease] = []
        round_trip = 0.0

        def claim() -> None:
            nonlocal round_trip
            started = time.monotonic()
            leases.extend(
                self.backend.claim(
                    self.queues, worker=self.worker_id, lease_ttl=self.lease_ttl, limit=limit
                )
            )
            round_trip = time.monotonic() - started

        reached = self._call_backend(run, claim)
        tasks = tuple(HeldTask(lease, self.lease_ttl) for lease in leases)
        self._held.add(tasks)
        with self._lock:
            if reached and run.window is not None:
                window = prefetch_window.observe_claim(
                    run.window, asked=limit, got=len(tasks), round_trip=round_trip
                )
                self._adapt(run, window)
            run.schedule, dropped = scheduler.claimed(
                run.schedule, run.settings, tasks, reached=reached, now=time.monotonic()
            )
            self._held.forget_all(dropped)
            self._cond.notify_all()

    def _count_processed(self, taken: int) -> None:
        """Add `taken` acknowledged outcomes to `processed`.

        Under the lock, and only once the round trip is over: a ``+=`` around
        the call would read `processed` before it, and an acknowledgement made
        meanwhile by another thread (`Worker.stop_now`, the heartbeat thread)
        would be lost.
        """
        with self._lock:
            self.processed += taken

    def _acknowledge(self, run: WorkerRun, outcomes: tuple[Outcome, ...]) -> None:
        def send() -> None:
            self._count_processed(send_outcomes(self.backend, outcomes, self._held))

        reached = self._call_backend(run, send)
        with self._lock:
            run.schedule, dropped = scheduler.acknowledged(
                run.schedule,
                outcomes,
                reached=reached,
                broken=run.error is not None,
                now=time.monotonic(),
            )
            self._held.forget_all([outcome.held for outcome in dropped])
            self._cond.notify_all()

    def _upkeep(self, run: WorkerRun) -> float | None:
        """The heartbeat thread's upkeep step, if one is due (see `upkeep.next_upkeep`);
        seconds until the next may be, None if none will before it is woken."""
        with self._lock:
            step, run.schedule = upkeep.next_upkeep(
                run.schedule, run.settings, now=time.monotonic(), stopping=self._stop.is_set()
            )
        match step:
            case upkeep.Mark(tasks=tasks):
                self._mark(run, tasks)
                return 0.0
            case scheduler.Release(tasks=tasks):
                self._release(run, tasks)
                return 0.0
            case scheduler.Acknowledge(outcomes=outcomes):
                self._acknowledge(run, outcomes)
                return 0.0
            case scheduler.Wait(seconds=seconds):
                return self._limits(run, seconds)
            case None:
                return self._limits(run, None)
            case _:  # mypy checks that every kind of step is handled above
                assert_never(step)

    def _limits(self, run: WorkerRun, due_in: float | None) -> float | None:
        """Send the time limits that passed, abandon the attempts past their hard limit;
        seconds until the heartbeat thread must look again (`due_in`, or sooner)."""
        now = time.monotonic()
        hard, look_at = run.watch.due(now)
        for attempt in hard:
            self._abandon(run, attempt)
        if due_in is not None:
            run.watch.look_at = min(look_at, now + due_in)
        if look_at == float("inf"):
            return due_in
        until = max(look_at - now, 0.0)
        return until if due_in is None else min(due_in, until)

    def _abandon(self, run: WorkerRun, attempt: Attempt) -> None:
        """Record the outcome of an attempt past its hard limit, give up its thread, and stop
        the worker: only a fresh process gets the thread back."""
        held, why, thread = attempt.held, attempt.sent, attempt.thread
        assert why is not None
        assert thread is not None
        record = held.lease.record
        error = TaskError(
            exception_class_path=f"{why.error.__module__}.{why.error.__qualname__}",
            message=(
                f"{stop_message(why, attempt)}; it did not stop within "
                f"{attempt.grace:g} s, so its worker recorded this and replaces its process"
            ),
            traceback=_stack_of(thread),
        )
        decision = None
        if not held.lost:
            decision = cancelled(held.lease, error) if why is Stop.CANCELLED else None
            decision = decision or decide(held.lease, error)
        held.acknowledging = True
        log.error(
            "task %s (%s) attempt %d did not stop within %g s of its %s (hard limit): "
            "recorded as %s; its thread %s is abandoned, and the worker stops claiming "
            "and exits once its other tasks finish",
            record.id, record.task_path, record.attempts, attempt.grace,
            "cancel" if why is Stop.CANCELLED else "time limit",
            "lost (its lease was)" if decision is None else _fate(decision), thread.name,
        )  # fmt: skip
        with self._lock:
            if not attempt.returned:
                run.stuck.add(thread)
            self.stuck_threads.append(thread)
            run.schedule, _ = scheduler.finished(
                run.schedule, run.settings, Outcome(held, decision), now=time.monotonic()
            )
            run.thread_ended(self.threads)
            self._cond.notify_all()
        self.stop()

    def _mark(self, run: WorkerRun, tasks: tuple[HeldTask, ...]) -> None:
        def send() -> None:
            answers = self.backend.mark_started([held.lease for held in tasks])
            refused = [held for held, ok in zip(tasks, answers, strict=True) if not ok]
            if refused:
                heartbeat.refused_marks(refused, self._held)

        reached = self._call_backend(run, send)
        with self._lock:
            run.schedule = upkeep.marked(
                run.schedule, tasks, reached=reached, broken=run.error is not None
            )

    def _release(self, run: WorkerRun, tasks: tuple[HeldTask, ...]) -> None:
        def give_back() -> None:
            live = [held for held in tasks if not held.lost]
            if live:
                released = give_back_leases(self.backend, [held.lease for held in live])
                given = sum(record is not None for record in released)
                # A stop's give-back at INFO; an adaptive prefetch's, part of its sizing, at DEBUG.
                level = logging.INFO if self._stop.is_set() else logging.DEBUG
                log.log(level, "gave back %d prefetched task(s) not started", given)
            self._held.forget_all(tasks)

        reached = self._call_backend(run, give_back)
        with self._lock:
            run.schedule, dropped = scheduler.released(
                run.schedule, tasks, reached=reached, broken=run.error is not None
            )
            self._held.forget_all(dropped)
            self._cond.notify_all()

    def _idle(self, run: WorkerRun) -> None:
        try:
            self._idle_wait()
        finally:
            with self._lock:
                run.schedule = scheduler.idle_wait_ended(run.schedule)
                self._cond.notify_all()

    def _run_task(self, run: WorkerRun, held: HeldTask) -> bool:
        """Run `held` and hand its outcome to the scheduler; False if it was abandoned past
        its hard limit meanwhile (its outcome already decided: the thread then exits)."""
        decision = None
        started = time.monotonic()
        try:
            decision = execute(
                held,
                tasks=self._tasks,
                backend=self.backend,
                outage=self.outage,
                lease_ttl=self.lease_ttl,
                watch=run.watch,
                time_limit=self.time_limit,
                grace=self.time_limit_grace.total_seconds(),
            )
        except Exception:
            # Our own bug, not the task's (whatever the task raises, SystemExit
            # included, becomes its decision): the lease lapses and the reaper
            # decides; the thread goes on.
            log.exception("task %s: the worker failed running it", held.lease.task_id)
        except BaseException:  # our own code interrupted: the thread ends, the lease lapses
            self._held.forget(held)
            raise
        if held.attempt is not None and held.attempt.abandoned:
            with self._lock:
                held.attempt.returned = True  # so `_abandon` does not count it as stuck
            return False
        with self._lock:
            now = time.monotonic()
            if run.window is not None:
                self._adapt(run, prefetch_window.observe_run(run.window, now - started))
            run.schedule, news = scheduler.finished(
                run.schedule, run.settings, Outcome(held, decision), now=now
            )
            if run.window is not None:
                news |= self._give_back_excess(run, run.window)
            if news:
                self._cond.notify_all()
        return True

    def _give_back_excess(self, run: WorkerRun, window: prefetch_window.Window) -> bool:
        """Have the prefetched tasks that long runs left beyond the room given back (see
        `prefetch_window.excess`); whether any are. Under the lock."""
        schedule = run.schedule
        count = prefetch_window.excess(
            window, waiting=len(schedule.ready), running=len(schedule.running)
        )
        if count:
            run.schedule = scheduler.give_back(schedule, count)
        return count > 0

    def _idle_wait(self) -> None:
        """Nothing held, nothing ready: block until a task may be ready (or `stop()`).

        With its own maintenance the worker returns after one wait, to
        maintain and claim again. Without (``maintenance=False``: a
        supervisor's mover promotes deferred tasks, and wakes it when it
        does), it first asks `Backend.next_due`, then waits again each time a
        wait ends quietly (`Backend.wait_for_tasks` answers False: no task
        became READY), and returns to claim only when woken, when that due
        time comes (its claim promotes the task, so a retry this worker just
        deferred is not left to the mover's next pass), or after
        `QUIET_WAITS_PER_CLAIM` quiet waits. Each wait lasts at most
        `poll_interval`, so `stop()` is noticed as promptly as before.
        """
        poll = self.poll_interval.total_seconds()
        started = time.monotonic()
        try:
            due_at = None  # time.monotonic() when the earliest deferred task falls due
            if not self.maintenance:
                due = self.backend.next_due()
                if due is not None and due != NOTHING_DEFERRED:
                    due_at = started + due.total_seconds()
            quiet = 0
            while True:
                now = time.monotonic()
                # Until the due time, not past it; one already past waits a full
                # interval, so a task due in a queue nobody here claims cannot spin us.
                timeout = min(poll, due_at - now) if due_at is not None and due_at > now else poll
                woken = self.backend.wait_for_tasks(self.queues, timedelta(seconds=timeout))
                if self.maintenance or woken is not False or self._stop.is_set():
                    break
                quiet += 1
                if quiet >= QUIET_WAITS_PER_CLAIM or (
                    due_at is not None and time.monotonic() >= due_at
                ):
                    break
            self.outage.reached(started)
        except BackendUnavailable as exc:
            self._stop.wait(self.outage.failed(exc, 1, started))
