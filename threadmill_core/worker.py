"""`Worker`: claims, runs and acknowledges tasks in this process.

::

    worker = Worker(broker, queues=["default"], threads=4)
    worker.run(burst=True)   # returns once nothing is ready or running

A worker runs only tasks registered in its task registry (by default every
``@task`` imported in this process). A record naming any other path is
finalized FAILED with a `TaskQuarantined` error and nothing is imported on
the record's say-so.

Heartbeats: a daemon thread renews the leases of every running task in one
`extend_many` call each `lease_ttl / 3`. Task code cannot starve it (it
holds no lock a task can hold). When a renewal is refused the lease was
taken away (a reaper decided the task, or an operator acted): the task's
`TaskContext.lease_lost` turns true and its outcome is not written.

With ``maintenance=True`` (the default) the worker also runs the reaper and
the mover between claims, so a single in-process worker is a complete queue.

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
import logging
import os
import queue
import random
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import attrs

from threadmill_core import codec
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
from threadmill_core.plugins import notify
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


#: Outcomes are acknowledged in batches of up to this many ...
ACK_BATCH = 64
#: ... or once the oldest has waited this long (seconds), whichever comes first.
ACK_DELAY = 0.005


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
    #: Not started because the worker is stopping: to be released, not acknowledged.
    unstarted: bool = False


class Worker:
    """Claims tasks from `queues` (in that order of preference) and runs them on `threads` threads.

    `prefetch` is how many tasks the worker may hold beyond its threads,
    claimed ahead so a thread that finishes starts the next task without a
    round trip (default: as many as `threads`). Prefetched tasks are claimed
    (their leases renewed by the heartbeat); a graceful stop gives back the
    ones not started (`Backend.release`), while a killed worker's lapse and
    are retried like any lost lease, each having counted an attempt. Claims
    and acknowledgements go in batches: one `claim` refills the prefetch
    once it is half empty, and the outcomes of tasks that finished while the
    previous batch was in flight are sent in one `decide_many`. A task is
    held, and its lease renewed, until its outcome is acknowledged, so
    batching never weakens at-least-once.

    `lease_ttl` is how long a claim lives without a heartbeat (a task's own
    ``lease_ttl`` option overrides it). `poll_interval` bounds how long an
    idle worker waits before looking again (for deferred tasks falling due,
    on backends that cannot wake it). `tasks` is the registry of tasks this
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
        self.lease_ttl = validate_timedelta("lease_ttl", lease_ttl)
        self.poll_interval = validate_timedelta("poll_interval", poll_interval)
        self.maintenance = maintenance
        self.worker_id = worker_id or default_worker_id()
        self._tasks = dict(tasks) if tasks is not None else None
        #: Every lease held, by token: prefetched, running or being acknowledged.
        self._held: dict[str, _Held] = {}
        self._held_lock = threading.Lock()
        #: Prefetched leases waiting for a thread; None tells a thread to exit.
        self._inbox: queue.SimpleQueue[_Held | None] = queue.SimpleQueue()
        #: What task threads handed back since the loop last looked, and its wake-up.
        self._done: list[_Done] = []
        self._done_lock = threading.Lock()
        self._wake = threading.Event()
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
        self._wake.set()

    def run(self, *, burst: bool = False, max_tasks: int | None = None) -> int:
        """Work until `stop()`; returns how many tasks this call ran to an outcome.

        With `burst`, return once nothing is ready, due or held. With
        `max_tasks`, stop claiming after that many claims (a supervisor then
        recycles the process). Either way, tasks already running are finished
        and acknowledged before `run` returns, with their heartbeats going on,
        and prefetched tasks not started are given back.
        """
        self._stop.clear()
        processed_before = self.processed
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
        for runner in runners:
            runner.start()
        try:
            self._loop(burst, max_tasks)
        finally:
            for _ in runners:
                self._inbox.put(None)
            for runner in runners:
                runner.join()
            beating.set()
            heartbeat.join()
        return self.processed - processed_before

    def _loop(self, burst: bool, max_tasks: int | None) -> None:
        capacity = self.threads + self.prefetch
        # Refill once the prefetch is half empty, so each claim brings a batch.
        refill = max(1, (self.prefetch + 1) // 2)
        poll = self.poll_interval.total_seconds()
        claimed = 0
        failures = 0  # consecutive backend calls of this loop that found it unavailable
        retry_at = 0.0  # during an outage: when to call the backend again
        next_maintenance = 0.0
        unsent: list[_Done] = []  # outcomes whose acknowledgement has not landed yet
        unsent_since = 0.0  # when the oldest of them came back
        give_back: list[_Held] = []  # prefetched leases to release on the way out
        while True:
            for item in self._take_done():
                if item.unstarted:
                    give_back.append(item.held)
                else:
                    if not unsent:
                        unsent_since = time.monotonic()
                    unsent.append(item)
            if self._stop.is_set():
                give_back += self._drain_inbox()
            # Stopped, or claimed all it may: finish what is held, claim nothing more.
            stopping = self._stop.is_set() or (max_tasks is not None and claimed >= max_tasks)
            leases: list[Lease] = []
            found_nothing = False  # this pass asked for tasks and got none
            started = time.monotonic()
            room = 0 if stopping else capacity - len(self._held)
            if max_tasks is not None:
                room = min(room, max_tasks - claimed)
            refilling = room > 0 and (room >= refill or self._inbox.empty())
            # Outcomes wait a moment to go in one batch, unless a call goes anyway
            # (a refill) or the threads have nothing left to overlap it with.
            acking = bool(unsent) and (
                refilling
                or stopping
                or len(unsent) >= ACK_BATCH
                or started - unsent_since >= ACK_DELAY
                or self._inbox.empty()
            )
            if started >= retry_at and (acking or give_back or not stopping):
                try:
                    if acking:
                        self._acknowledge(unsent)
                        unsent = []
                    if give_back:
                        self._release(give_back)
                        give_back = []
                    if not stopping:
                        if self.maintenance and started >= next_maintenance:
                            self.run_maintenance()
                            next_maintenance = time.monotonic() + poll
                        if refilling:
                            leases = self._claim(room)
                            found_nothing = not leases
                    self.outage.reached(started)
                    failures = 0
                except BackendUnavailable as exc:
                    failures += 1
                    retry_at = time.monotonic() + self.outage.failed(exc, failures, started)
            claimed += len(leases)
            for lease in leases:
                held = _Held(lease, self.lease_ttl)
                with self._held_lock:
                    self._held[lease.token] = held
                self._inbox.put(held)
            if not self._held and not unsent and not give_back:
                if stopping:
                    return
                if found_nothing:
                    if burst:
                        return
                    self._idle_wait()
                    continue
            now = time.monotonic()
            backing_off = retry_at - now
            if backing_off > 0:
                pause = backing_off
            elif leases or give_back:
                continue  # more to do at once
            elif unsent:
                pause = unsent_since + ACK_DELAY - now  # until the batch is due
            else:
                pause = poll  # until a task finishes, or maintenance is due
            self._wake.wait(min(max(pause, 0.0), poll))
            self._wake.clear()

    def _idle_wait(self) -> None:
        """Nothing held, nothing ready: block until a task may be ready (or `stop()`)."""
        started = time.monotonic()
        try:
            self.backend.wait_for_tasks(self.queues, self.poll_interval)
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

    def _take_done(self) -> list[_Done]:
        with self._done_lock:
            done, self._done = self._done, []
        return done

    def _drain_inbox(self) -> list[_Held]:
        """Take back the prefetched leases no thread has started."""
        waiting: list[_Held] = []
        while True:
            try:
                held = self._inbox.get_nowait()
            except queue.Empty:
                return waiting
            if held is None:  # not ours to take: a thread's exit signal
                self._inbox.put(None)
                return waiting
            waiting.append(held)

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
            for item, record in zip(sending, stored, strict=True):
                self._acknowledged(item, record)
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

    def _acknowledged(self, item: _Done, stored: TaskResult | None) -> None:
        decision = item.decision
        assert decision is not None
        record = decision.record
        if stored is None:
            log.warning(
                "task %s (%s) attempt %d: acknowledgement refused, the lease was lost",
                record.id, record.task_path, record.attempts,
            )  # fmt: skip
            return
        self.processed += 1
        if item.held.context is None:  # quarantined without running
            notify("threadmill_task_finished", record=stored)
            return
        if decision.retry_delay is not None:
            log.warning(
                "task %s (%s) attempt %d failed after %.3f s (%s); retry in %.3f s",
                record.id, record.task_path, record.attempts, item.held.duration,
                record.errors[-1].exception_class_path, decision.retry_delay.total_seconds(),
            )  # fmt: skip
            notify("threadmill_task_retried", record=stored, delay=decision.retry_delay)
            return
        # A failure is worth a line at WARNING; success is the norm, at DEBUG.
        level = logging.DEBUG if stored.status is TaskResultStatus.SUCCESSFUL else logging.WARNING
        if log.isEnabledFor(level):
            log.log(
                level,
                "task %s (%s) attempt %d %s in %.3f s",
                record.id, record.task_path, record.attempts, stored.status.value,
                item.held.duration,
            )  # fmt: skip
        notify("threadmill_task_finished", record=stored)

    # --- one task ------------------------------------------------------------------------

    def _task_thread(self) -> None:
        while (held := self._inbox.get()) is not None:
            if self._stop.is_set():  # stopping: what is not started goes back
                with self._done_lock:
                    self._done.append(_Done(held, None, unstarted=True))
                self._wake.set()
                continue
            decision = None
            try:
                decision = self._execute(held)
            except BaseException:
                # Our own bug, not the task's (task errors become decisions): the
                # lease lapses and the reaper decides; the thread goes on.
                log.exception("task %s: the worker failed running it", held.lease.task_id)
            with self._done_lock:
                self._done.append(_Done(held, decision))
                # Wake the loop for the first outcome (it starts the batch's clock),
                # a full batch, or when the prefetch ran dry; not for every task.
                wake = len(self._done) in (1, ACK_BATCH) or self._inbox.empty()
            if wake:
                self._wake.set()

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
