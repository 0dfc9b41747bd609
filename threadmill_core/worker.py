"""`Worker`: claims, runs and acknowledges tasks in this process.

::

    worker = Worker(broker, queues=["default"], threads=4)
    worker.run(burst=True)   # returns once nothing is ready or running

A worker runs only tasks registered in its task registry (by default every
``@task`` imported in this process). A record naming any other path is
finalized FAILED with a `TaskQuarantined` error and nothing is imported on
the record's say-so.

Heartbeats: a daemon thread renews the leases of every held task in one
`extend_many` call each `lease_ttl / 3`. Task code cannot starve it (it
holds no lock a task can hold). When a renewal is refused the lease was
taken away (a reaper decided the task, or an operator acted): the task's
`TaskContext.lease_lost` turns true and its outcome is not written.

With ``maintenance=True`` (the default) the thread that calls `run` runs
the reaper and the mover every `poll_interval` (the first pass before any
claim), so a single in-process worker is a complete queue. The task threads
do everything else themselves: there is no dispatcher thread between the
backend and the tasks (see `Worker.run`).

Outages: a backend call that raises `BackendUnavailable` (Redis restarting,
a dropped connection) never kills the worker. Each loop backs off
exponentially (`reconnect_backoff`) and tries again; the process logs one
warning when the backend goes away and one line when it is back (see
`Outage`). An acknowledgement is never dropped: it is sent again with the
same lease until the backend answers, which it does as the first time if an
earlier send was applied but its reply lost; meanwhile the task stays among
the running ones, so heartbeats keep its lease alive.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import os
import random
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import attrs

from threadmill_core import codec
from threadmill_core.backend import NOTHING_DEFERRED
from threadmill_core.broker import Broker
from threadmill_core.errors import BackendUnavailable, TaskQuarantined, UnsupportedValue
from threadmill_core.maintenance import promote, reap
from threadmill_core.models import (
    Decision,
    Lease,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultStatus,
    validate_timedelta,
)
from threadmill_core.plugins import notify, notify_each
from threadmill_core.retry import ExponentialBackoff, decide
from threadmill_core.task import Task, registered_task, registered_tasks, validate_queue

log = logging.getLogger("threadmill.worker")

QUARANTINE_PATH = f"{TaskQuarantined.__module__}.{TaskQuarantined.__qualname__}"


#: How long to wait between attempts to reach an unavailable backend: 0.1 s,
#: doubling to 5 s, each plus up to half again at random so that the workers
#: of a restarted server do not all come back in the same instant.
RECONNECT_BACKOFF = ExponentialBackoff(
    base_delay=0.1, max_delay=5.0, factor=2.0, max_retries=None, jitter=0.5
)


#: Outcomes are acknowledged in batches of up to this many (or the worker's
#: whole room, threads plus prefetch, if that is more: a claim sends what has
#: gathered anyway, and one more round trip per claim would only split it) ...
ACK_BATCH = 64
#: ... or once the oldest has waited this long (seconds), whichever comes first.
#: Under load a batch fills first (64 tasks of 150 µs take 10 ms); the delay
#: bounds how late a result shows while tasks keep coming. An idle worker
#: sends what it has at once.
ACK_DELAY = 0.010

#: A worker without its own maintenance claims after this many idle waits in
#: a row that ended quietly (no wake-up), however quiet: a wake-up is a hint
#: and may be lost. With the default 1 s poll interval, once every 30 s.
QUIET_WAITS_PER_CLAIM = 30


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Outage:
    """One process's view of backend outages: backoff delays, and one log line each way.

    Every loop that calls the backend reports to the same `Outage`, passing
    the `time.monotonic()` at which its call started: `failed` when the call
    raised `BackendUnavailable` (with how many times in a row that loop has
    failed; the answer is how long to wait before trying again), `reached`
    after it got through. The first failure logs one warning, the first
    success after it one info line saying how long it lasted; calls in
    between log nothing, and no traceback is logged. A call that started
    before an outage and got through after it began does not end it, and one
    that started before the outage ended and failed after it does not start
    another: threads racing at the edges log no extra lines. Thread-safe.
    """

    def __init__(
        self, logger: logging.Logger, backoff: ExponentialBackoff = RECONNECT_BACKOFF
    ) -> None:
        self.log = logger
        self.backoff = backoff
        #: Outages seen so far (each one logged once).
        self.count = 0
        self._lock = threading.Lock()
        self._since: float | None = None
        self._ended = float("-inf")
        self._failures = 0

    @property
    def down(self) -> bool:
        """True from a failure until a call started after it gets through."""
        return self._since is not None

    def failed(self, exc: BackendUnavailable, attempt: int, started: float) -> float:
        """Note a call started at `started` that failed, its loop's `attempt`-th in a row.

        Returns how many seconds that loop should wait before trying again.
        """
        with self._lock:
            self._failures += 1
            if self._since is None and started >= self._ended:
                self._since = started
                self.count += 1
                self.log.warning(
                    "backend unavailable (%s: %s); retrying with backoff, at most %g s apart",
                    type(exc).__name__, exc, self.backoff.max_delay,
                )  # fmt: skip
        delay = self.backoff.delay_for(attempt)
        return delay + delay * self.backoff.jitter * random.random()

    def reached(self, started: float) -> None:
        """Note a call started at `started` that got through; it may end the outage."""
        if self._since is None:  # the hot path: no lock when nothing is wrong
            return
        with self._lock:
            if self._since is None or started < self._since:
                return
            now = time.monotonic()
            self.log.info(
                "backend reachable again after %.1f s (%d failed calls meanwhile)",
                now - self._since, self._failures,
            )  # fmt: skip
            self._since = None
            self._ended = now
            self._failures = 0


@attrs.define(eq=False)
class _Held:
    """A lease this worker holds: waiting for a thread, running, or being acknowledged."""

    lease: Lease
    lease_ttl: timedelta
    #: Set when a thread starts the task; None while it waits in the prefetch.
    context: TaskContext | None = None
    #: A renewal was refused while the task waited: it must not start.
    lost: bool = False
    #: Set once the outcome is being sent: a refused renewal then means the
    #: outcome landed (or will be refused itself), not that the lease is lost.
    acknowledging: bool = False
    #: Seconds the task ran, for the acknowledgement's log line.
    duration: float = 0.0


@attrs.frozen
class _Done:
    """What a task thread hands back: the decision to send, or None when there is none."""

    held: _Held
    decision: Decision | None


@attrs.define(eq=False)
class _Plan:
    """What the task threads of one `Worker.run` share, guarded by the worker's condition."""

    burst: bool
    max_tasks: int | None
    #: Prefetched leases no thread has started, in claim order.
    ready: collections.deque[_Held] = attrs.Factory(collections.deque)
    #: Outcomes not acknowledged yet, and when the oldest of them came back.
    unsent: list[_Done] = attrs.Factory(list)
    unsent_since: float = 0.0
    #: Prefetched leases to give back (the worker is stopping).
    give_back: list[_Held] = attrs.Factory(list)
    #: A thread is in that call now (one at a time of each).
    claiming: bool = False
    acking: bool = False
    releasing: bool = False
    idling: bool = False
    claimed: int = 0
    #: A claim found nothing: the next waits until then (time.monotonic()).
    nothing_until: float = 0.0
    #: During an outage: when to call the backend again; failures in a row.
    retry_at: float = 0.0
    failures: int = 0
    exit: bool = False
    exited: int = 0
    #: What broke a task thread (our own bug, not a task's error), raised by `run`.
    error: BaseException | None = None
    finished: threading.Event = attrs.Factory(threading.Event)


class Worker:
    """Claims tasks from `queues` (in that order of preference) and runs them on `threads` threads.

    `prefetch` is how many tasks the worker may hold beyond its threads,
    claimed ahead so a thread that finishes starts the next task without a
    round trip (default: as many as `threads`). Prefetched tasks are claimed
    (their leases renewed by the heartbeat); a graceful stop gives back the
    ones not started (`Backend.release`), while a killed worker's lapse and
    are retried like any lost lease, each having counted an attempt. Claims
    and acknowledgements go in batches: one `claim` refills the prefetch
    once it is half empty (with one thread, once it is empty: see
    `_refill_at`), and outcomes are sent together in one `decide_many`
    once `ACK_BATCH` (or ``threads + prefetch``, if more) have gathered,
    the oldest has waited `ACK_DELAY`, a claim is due, or nothing is left
    to run. A task is held, and its lease renewed, until its outcome is
    acknowledged, so batching never weakens at-least-once.

    `lease_ttl` is how long a claim lives without a heartbeat (a task's own
    ``lease_ttl`` option overrides it). `poll_interval` is the maintenance
    interval (``maintenance=True``) and the longest single idle wait, so it
    bounds how long `stop()` takes to be noticed; without maintenance, an
    idle worker waits through quiet intervals until it is woken or the next
    deferred task falls due (see `_idle_wait`). `tasks` is the registry of tasks this
    worker may run, by path; by default, every task registered in this
    process. `reconnect_backoff` spaces out the attempts to reach a backend
    that is unavailable (its `max_retries` is ignored: the worker never gives
    up on the backend).
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
    ) -> None:
        if isinstance(queues, str):
            queues = [queues]
        if not queues:
            raise ValueError("a worker needs at least one queue")
        self.queues = [validate_queue(q) for q in queues]
        if type(threads) is not int or threads < 1:
            raise ValueError(f"threads must be an int >= 1, got {threads!r}")
        if prefetch is None:
            prefetch = threads
        if type(prefetch) is not int or prefetch < 0:
            raise ValueError(f"prefetch must be an int >= 0, got {prefetch!r}")
        self.broker = broker
        self.backend = broker.backend
        self.threads = threads
        self.prefetch = prefetch
        self._ack_batch = max(ACK_BATCH, threads + prefetch)
        self.lease_ttl = validate_timedelta("lease_ttl", lease_ttl)
        self.poll_interval = validate_timedelta("poll_interval", poll_interval)
        self.maintenance = maintenance
        self.worker_id = worker_id or default_worker_id()
        self._tasks = dict(tasks) if tasks is not None else None
        #: Every lease held, by token: prefetched, running or being acknowledged.
        self._held: dict[str, _Held] = {}
        self._held_lock = threading.Lock()
        #: Guards the current run's `_Plan`; task threads wait on `_cond` for work.
        #: Taken as ``with self._lock``, the condition's own lock: the condition's
        #: ``with`` adds two Python calls, and it is taken twice per task.
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._plan = _Plan(burst=False, max_tasks=None)
        self._stop = threading.Event()
        self.processed = 0
        #: Shared by every loop of this worker, so an outage is logged once.
        self.outage = Outage(log, reconnect_backoff)

    # --- the loop ------------------------------------------------------------------------

    def tasks(self) -> Mapping[str, Task[Any, Any]]:
        return self._tasks if self._tasks is not None else registered_tasks()

    @property
    def stopping(self) -> bool:
        """True once `stop()` was called and `run` is draining."""
        return self._stop.is_set()

    def stop(self) -> None:
        """Stop claiming; `run` gives back the prefetch and returns once the running
        tasks are acknowledged."""
        self._stop.set()
        with self._lock:  # reentrant: safe from a signal handler in any thread
            self._cond.notify_all()

    def run(self, *, burst: bool = False, max_tasks: int | None = None) -> int:
        """Work until `stop()`; returns how many tasks this call ran to an outcome.

        With `burst`, return once nothing is ready, due or held. With
        `max_tasks`, stop claiming after that many claims (a supervisor then
        recycles the process). Either way, tasks already running are finished
        and acknowledged before `run` returns, with their heartbeats going on,
        and prefetched tasks not started are given back.

        There is no dispatcher thread: each task thread takes the next step
        itself (`_next_step`): send the acknowledgements that are due, refill
        the prefetch, run a task, or wait. With one thread, claims,
        acknowledgements and tasks follow each other in that thread, and no
        task waits on a hand-over between threads. This thread runs the
        maintenance passes, if any, and waits.
        """
        self._stop.clear()
        processed_before = self.processed
        self._plan = _Plan(burst=burst, max_tasks=max_tasks)
        beating = threading.Event()
        heartbeat = threading.Thread(
            target=self._heartbeat_loop,
            args=(beating,),
            name=f"threadmill-heartbeat-{self.worker_id}",
            daemon=True,
        )
        runners = [
            threading.Thread(target=self._task_thread, name=f"threadmill-task-{n}", daemon=True)
            for n in range(self.threads)
        ]
        heartbeat.start()
        try:
            poll = self.poll_interval.total_seconds()
            # The first pass comes before any claim: what is due is promoted first.
            next_maintenance = self._maintain(0) if self.maintenance else float("inf")
            for runner in runners:
                runner.start()
            while any(runner.is_alive() for runner in runners):
                if time.monotonic() >= next_maintenance and not self._stop.is_set():
                    next_maintenance = self._maintain(poll)
                    with self._lock:  # promoted tasks may be ready: look again
                        self._plan.nothing_until = 0.0
                        self._cond.notify_all()
                self._plan.finished.wait(min(max(next_maintenance - time.monotonic(), 0.0), poll))
        except BaseException:
            self.stop()  # our own bug, or KeyboardInterrupt here: the threads drain and exit
            raise
        finally:
            for runner in runners:
                if runner.is_alive():
                    runner.join()
            beating.set()
            heartbeat.join()
        if self._plan.error is not None:
            raise self._plan.error
        return self.processed - processed_before

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

    # --- the steps a task thread takes ---------------------------------------------------

    def _task_thread(self) -> None:
        plan = self._plan
        try:
            while (step := self._next_step(plan)) is not None:
                step()
        except BaseException as exc:
            # Our own bug, or SystemExit from a task: the others stop gracefully
            # (the prefetch given back, outcomes acknowledged), and `run` raises it.
            log.exception("a worker thread failed; stopping the worker")
            self._failed(plan, exc)
        finally:
            with self._lock:
                plan.exited += 1
                if plan.exited == self.threads:
                    plan.finished.set()
                self._cond.notify_all()

    def _next_step(self, plan: _Plan) -> Callable[[], None] | None:
        """What this thread should do next (None: exit), waiting until there is something."""
        capacity = self.threads + self.prefetch
        refill = self._refill_at()
        poll = self.poll_interval.total_seconds()
        with self._lock:
            while True:
                if plan.exit:
                    return None
                now = time.monotonic()
                stopping = self._stop.is_set()
                if stopping and plan.ready:
                    plan.give_back.extend(plan.ready)
                    plan.ready.clear()
                reachable = now >= plan.retry_at
                if plan.give_back and reachable and not plan.releasing:
                    giving, plan.give_back = plan.give_back, []
                    plan.releasing = True
                    return functools.partial(self._release_step, plan, giving)
                room = 0 if stopping else capacity - len(self._held)
                if plan.max_tasks is not None:
                    room = min(room, plan.max_tasks - plan.claimed)
                claim = (
                    room > 0
                    and (room >= refill or not plan.ready)
                    and now >= plan.nothing_until
                    and not plan.claiming
                )
                # Outcomes wait a moment to go in one batch, unless a call goes
                # anyway (a refill) or there is nothing left to run meanwhile.
                if (
                    plan.unsent
                    and reachable
                    and not plan.acking
                    and (
                        claim
                        or stopping
                        or not plan.ready
                        or len(plan.unsent) >= self._ack_batch
                        or now - plan.unsent_since >= ACK_DELAY
                    )
                ):
                    sending, plan.unsent = plan.unsent, []
                    plan.acking = True
                    return functools.partial(self._acknowledge_step, plan, sending)
                if claim and reachable:
                    plan.claiming = True
                    return functools.partial(self._claim_step, plan, room)
                if plan.ready:
                    return functools.partial(self._run_step, plan, plan.ready.popleft())
                idle = not self._held and not plan.unsent and not plan.give_back
                if idle and (stopping or room <= 0):  # stopped, or claimed all it may
                    plan.exit = True
                    self._cond.notify_all()
                    return None
                if idle and reachable and now < plan.nothing_until and not plan.claiming:
                    if plan.burst:
                        plan.exit = True
                        self._cond.notify_all()
                        return None
                    if not plan.idling:
                        plan.idling = True
                        return functools.partial(self._idle_step, plan)
                pause = poll
                if plan.unsent and not plan.acking:
                    pause = min(pause, plan.unsent_since + ACK_DELAY - now)
                if not reachable:
                    pause = min(pause, plan.retry_at - now)
                elif room > 0 and not plan.claiming and plan.nothing_until > now:
                    pause = min(pause, plan.nothing_until - now)
                self._cond.wait(max(pause, 0.0))

    def _refill_at(self) -> int:
        """How much room (free threads and prefetch) makes a claim worth it while tasks wait.

        With several threads, half the prefetch: the other threads run what
        is left while one claims the next batch. With one, the whole of it:
        nothing runs while the only thread claims anyway, so it claims when
        it has run out (all its room free), and each claim brings a batch
        twice the size.
        """
        if self.threads == 1:
            return 1 + self.prefetch
        return max(1, (self.prefetch + 1) // 2)

    def _failed(self, plan: _Plan, exc: BaseException) -> None:
        with self._lock:
            if plan.error is None:
                plan.error = exc
        self.stop()

    def _backend_step(self, plan: _Plan, call: Callable[[], Any]) -> bool:
        """Run one backend call of a step; False if it did not get through.

        An unavailable backend means a backoff before the next call. Any other
        error is our own bug: logged, the worker stops, and `run` raises it.
        """
        started = time.monotonic()
        try:
            call()
        except BackendUnavailable as exc:
            with self._lock:
                plan.failures += 1
                plan.retry_at = time.monotonic() + self.outage.failed(exc, plan.failures, started)
            return False
        except Exception as exc:
            log.exception("a call to the backend failed unexpectedly; stopping the worker")
            self._failed(plan, exc)
            return False
        self.outage.reached(started)
        with self._lock:
            plan.failures = 0
        return True

    def _claim_step(self, plan: _Plan, limit: int) -> None:
        leases: list[Lease] = []

        def claim() -> None:
            leases.extend(self._claim(limit))

        reached = self._backend_step(plan, claim)
        helds = [_Held(lease, self.lease_ttl) for lease in leases]
        with self._held_lock:
            for held in helds:
                self._held[held.lease.token] = held
        with self._lock:
            plan.claiming = False
            plan.claimed += len(helds)
            plan.ready.extend(helds)
            if reached and not helds:  # nothing ready: do not ask again at once
                plan.nothing_until = time.monotonic() + self.poll_interval.total_seconds()
            self._cond.notify_all()

    def _acknowledge_step(self, plan: _Plan, batch: list[_Done]) -> None:
        reached = self._backend_step(plan, functools.partial(self._acknowledge, batch))
        with self._lock:
            plan.acking = False
            if reached:
                plan.nothing_until = 0.0  # a retry may have made a task ready
            elif plan.error is not None:  # not an outage: their leases lapse, the reaper decides
                for item in batch:
                    self._forget(item.held)
            else:  # sent again, same leases, once the backend is back
                if not plan.unsent:
                    plan.unsent_since = time.monotonic()
                plan.unsent = batch + plan.unsent
            self._cond.notify_all()

    def _release_step(self, plan: _Plan, batch: list[_Held]) -> None:
        reached = self._backend_step(plan, functools.partial(self._release, batch))
        with self._lock:
            plan.releasing = False
            if not reached and plan.error is None:
                plan.give_back = batch + plan.give_back
            elif not reached:  # not an outage: their leases lapse, the reaper decides
                for held in batch:
                    self._forget(held)
            self._cond.notify_all()

    def _idle_step(self, plan: _Plan) -> None:
        try:
            self._idle_wait()
        finally:
            with self._lock:
                plan.idling = False
                plan.nothing_until = 0.0
                self._cond.notify_all()

    def _run_step(self, plan: _Plan, held: _Held) -> None:
        decision = None
        try:
            decision = self._execute(held)
        except Exception:
            # Our own bug, not the task's (task errors become decisions): the
            # lease lapses and the reaper decides; the thread goes on.
            log.exception("task %s: the worker failed running it", held.lease.task_id)
        except BaseException:  # SystemExit or KeyboardInterrupt in the task: its lease lapses
            self._forget(held)
            raise
        with self._lock:
            if not plan.unsent:
                plan.unsent_since = time.monotonic()
            plan.unsent.append(_Done(held, decision))
            # Others may be waiting for the batch (it starts a clock, or is full) or for
            # work; a thread with more to run sends it itself, on its next step.
            if len(plan.unsent) in (1, self._ack_batch) or not plan.ready:
                self._cond.notify_all()

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

    def run_maintenance(self) -> None:
        """One reaper pass and one mover pass; `BackendUnavailable` goes to the caller."""
        reap(self.backend, claim_ttl=self.lease_ttl)
        promote(self.backend)

    def _claim(self, limit: int) -> list[Lease]:
        return self.backend.claim(
            self.queues, worker=self.worker_id, lease_ttl=self.lease_ttl, limit=limit
        )

    def _forget(self, held: _Held) -> None:
        with self._held_lock:
            if self._held.get(held.lease.token) is held:
                del self._held[held.lease.token]

    def _release(self, waiting: list[_Held]) -> None:
        """Give back prefetched leases, in one call; `BackendUnavailable` goes to the caller."""
        live = [held for held in waiting if not held.lost]
        if live:
            released = self.backend.release([held.lease for held in live])
            given = sum(record is not None for record in released)
            log.info("gave back %d prefetched task(s) not started", given)
        for held in waiting:
            self._forget(held)

    def _acknowledge(self, done: list[_Done]) -> None:
        """Send the outcomes in `done` in one `decide_many`; `BackendUnavailable` to the caller.

        A send that was applied but whose reply was lost is recognised by the
        backend when the same decisions are sent again, and answered as the
        first time; a lease that really was lost meanwhile is refused, the
        only way an outcome is not written.
        """
        sending = [item for item in done if item.decision is not None]
        if sending:
            # The heartbeat may have renewed a lease meanwhile: same token, so a
            # decision made with the claim's lease is still the current holder's.
            decisions = [item.decision for item in sending if item.decision is not None]
            try:
                stored = self.backend.decide_many(decisions)
            except BackendUnavailable:
                raise
            except Exception:
                # A decision the backend refused to take (our bug, not the task's):
                # send the others one by one; that one's lease lapses and is reaped.
                log.exception("acknowledging %d tasks failed; sending them one by one",
                              len(decisions))  # fmt: skip
                stored = [self._decide_one(decision) for decision in decisions]
            finished = [
                record
                for item, record in zip(sending, stored, strict=True)
                if self._acknowledged(item, record)
            ]
            # Once per batch, not per task: whether some plugin listens is asked once.
            notify_each("threadmill_task_finished", "record", finished)
        for item in done:
            self._forget(item.held)

    def _decide_one(self, decision: Decision) -> TaskResult | None:
        try:
            return self.backend.decide_many([decision])[0]
        except BackendUnavailable:
            raise
        except Exception:
            log.exception("task %s: acknowledgement failed; its lease will lapse and be reaped",
                          decision.lease.task_id)  # fmt: skip
            return None

    def _acknowledged(self, item: _Done, stored: TaskResult | None) -> bool:
        """Count and log one answered decision; whether its task is now finished.

        A retry is announced here (``threadmill_task_retried``); the caller
        announces the finished ones of a batch together.
        """
        decision = item.decision
        assert decision is not None
        record = decision.record
        if stored is None:
            log.warning(
                "task %s (%s) attempt %d: acknowledgement refused, the lease was lost",
                record.id, record.task_path, record.attempts,
            )  # fmt: skip
            return False
        self.processed += 1
        if item.held.context is None:  # quarantined without running
            return True
        if decision.retry_delay is not None:
            log.warning(
                "task %s (%s) attempt %d failed after %.3f s (%s); retry in %.3f s",
                record.id, record.task_path, record.attempts, item.held.duration,
                record.errors[-1].exception_class_path, decision.retry_delay.total_seconds(),
            )  # fmt: skip
            notify("threadmill_task_retried", record=stored, delay=decision.retry_delay)
            return False
        # A failure is worth a line at WARNING; success is the norm, at DEBUG.
        level = logging.DEBUG if stored.status is TaskResultStatus.SUCCESSFUL else logging.WARNING
        if log.isEnabledFor(level):
            log.log(
                level,
                "task %s (%s) attempt %d %s in %.3f s",
                record.id, record.task_path, record.attempts, stored.status.value,
                item.held.duration,
            )  # fmt: skip
        return True

    # --- one task ------------------------------------------------------------------------

    def _execute(self, held: _Held) -> Decision | None:
        """Run one held task; return the decision to acknowledge, or None to send nothing."""
        if held.lost:
            log.warning("task %s: lease lost before it started; not run", held.lease.task_id)
            return None
        lease = held.lease
        record = lease.record
        # One lookup per task: copying the whole registry here would sit on the hot path.
        task = (
            self._tasks.get(record.task_path)
            if self._tasks is not None
            else registered_task(record.task_path)
        )
        if task is None:
            return self._quarantine(lease, f"task {record.task_path} is not registered")
        if task.lease_ttl is not None and task.lease_ttl != self.lease_ttl:
            started = time.monotonic()
            try:
                renewed = self.backend.extend(lease, task.lease_ttl)
                self.outage.reached(started)
            except BackendUnavailable as exc:
                # The claim's lease holds for now, and the first heartbeat
                # (within a third of it) renews it for the task's own TTL.
                self.outage.failed(exc, 1, started)
                renewed = lease
            if renewed is None:
                log.warning("task %s: lease lost before it started; not run", record.id)
                return None
            held.lease = lease = renewed
            held.lease_ttl = task.lease_ttl
        context = TaskContext(record=record, attempt=record.attempts, token=lease.token)
        held.context = context
        notify("threadmill_task_started", lease=lease)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "task %s (%s) attempt %d started", record.id, record.task_path, record.attempts
            )
        started = time.monotonic()
        decision = self._call(task, lease, context)
        held.duration = time.monotonic() - started
        if context.lease_lost:
            log.warning(
                "task %s (%s) attempt %d finished after its lease was lost; "
                "outcome not written",
                record.id, record.task_path, record.attempts,
            )  # fmt: skip
            return None
        # Still held while the outcome is sent, so that heartbeats keep the
        # lease alive if the backend is unavailable.
        held.acknowledging = True
        return decision

    def _call(self, task: Task[Any, Any], lease: Lease, context: TaskContext) -> Decision:
        record = lease.record
        args = [context, *record.args] if task.takes_context else list(record.args)
        try:
            if task.is_async:
                value = asyncio.run(task.func(*args, **record.kwargs))
            else:
                value = task.func(*args, **record.kwargs)
            if value is not None:  # what most tasks return, and always carried
                codec.check_value(value, "the return value")
        except UnsupportedValue as exc:
            error = TaskError.from_exception(exc)
            return decide(lease, error)
        except Exception as exc:
            error = TaskError.from_exception(exc, traceback.format_exc())
            return decide(lease, error)
        done = attrs.evolve(record, status=TaskResultStatus.SUCCESSFUL, return_value=value)
        return Decision(lease=lease, record=done)

    def _quarantine(self, lease: Lease, why: str) -> Decision:
        record = lease.record
        error = TaskError(exception_class_path=QUARANTINE_PATH, message=why)
        failed = attrs.evolve(
            record, status=TaskResultStatus.FAILED, errors=(*record.errors, error)
        )
        log.error("task %s quarantined as FAILED: %s", record.id, why)
        return Decision(lease=lease, record=failed)

    # --- heartbeats ----------------------------------------------------------------------

    def _heartbeat_loop(self, done: threading.Event) -> None:
        # Runs until `run` has drained its tasks, not just until stop(): a
        # graceful shutdown must keep the leases of finishing tasks alive.
        failures = 0
        pause = self._heartbeat_interval()
        while not done.wait(pause):
            pause = self._heartbeat_interval()
            started = time.monotonic()
            try:
                self._beat()
                failures = 0
            except BackendUnavailable as exc:
                failures += 1
                # Try again before the next beat is due: the leases run out meanwhile.
                pause = min(pause, self.outage.failed(exc, failures, started))
            except Exception:
                log.exception("heartbeat failed; retrying at the next beat")

    def _heartbeat_interval(self) -> float:
        with self._held_lock:
            ttls = {held.lease_ttl for held in self._held.values()}
        return min([self.lease_ttl, *ttls]).total_seconds() / 3

    def heartbeat(self) -> None:
        """Renew the leases of every held task, one `extend_many` call per lease TTL.

        A renewal that is refused means the lease was taken away: a running
        task's context says so and its outcome will not be written; a
        prefetched one will not start. An unavailable backend is noted in
        `outage`; the heartbeat thread tries again soon.
        """
        started = time.monotonic()
        try:
            self._beat()
        except BackendUnavailable as exc:
            self.outage.failed(exc, 1, started)
        except Exception:
            log.exception("heartbeat failed; retrying at the next beat")

    def _beat(self) -> None:
        with self._held_lock:
            holding = list(self._held.values())
        by_ttl: dict[timedelta, list[_Held]] = {}
        for held in holding:
            by_ttl.setdefault(held.lease_ttl, []).append(held)
        for ttl, items in by_ttl.items():
            started = time.monotonic()
            renewed = self.backend.extend_many([held.lease for held in items], ttl)
            self.outage.reached(started)
            with self._held_lock:
                still_held = {id(held) for held in self._held.values()}
            for held, lease in zip(items, renewed, strict=True):
                if id(held) not in still_held:
                    continue  # finished meanwhile: a refusal then means it was acknowledged
                if lease is not None:
                    held.lease = lease
                elif held.context is None:
                    held.lost = True
                elif not held.acknowledging and not held.context.lease_lost:
                    held.context.mark_lease_lost()
                    log.warning(
                        "task %s lost its lease (reaped or changed by an operator); "
                        "its outcome will not be written",
                        held.lease.task_id,
                    )
