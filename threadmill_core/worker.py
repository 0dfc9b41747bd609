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
import random
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
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


@attrs.define
class _Running:
    lease: Lease
    context: TaskContext
    lease_ttl: timedelta
    #: Set once the outcome is being sent: a refused renewal then means the
    #: outcome landed (or will be refused itself), not that the lease is lost.
    acknowledging: bool = False


class Worker:
    """Claims tasks from `queues` (in that order of preference) and runs them on `threads` threads.

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
        self.broker = broker
        self.backend = broker.backend
        self.threads = threads
        self.lease_ttl = validate_timedelta("lease_ttl", lease_ttl)
        self.poll_interval = validate_timedelta("poll_interval", poll_interval)
        self.maintenance = maintenance
        self.worker_id = worker_id or default_worker_id()
        self._tasks = dict(tasks) if tasks is not None else None
        self._running: dict[str, _Running] = {}
        self._running_lock = threading.Lock()
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
        """Stop claiming; `run` returns once the running tasks are acknowledged."""
        self._stop.set()

    def run(self, *, burst: bool = False, max_tasks: int | None = None) -> int:
        """Work until `stop()`; returns how many tasks this call ran to an outcome.

        With `burst`, return once nothing is ready, due or running. With
        `max_tasks`, stop claiming after that many claims (a supervisor then
        recycles the process). Either way, tasks already running are finished
        and acknowledged before `run` returns, with their heartbeats going on.
        """
        self._stop.clear()
        processed_before = self.processed
        claimed = 0
        beating = threading.Event()
        heartbeat = threading.Thread(
            target=self._heartbeat_loop,
            args=(beating,),
            name=f"threadmill-heartbeat-{self.worker_id}",
            daemon=True,
        )
        heartbeat.start()
        futures: set[Future[None]] = set()
        next_maintenance = 0.0
        failures = 0  # consecutive passes that found the backend unavailable
        retry_at = 0.0  # during an outage: when to try the backend again
        poll = self.poll_interval.total_seconds()
        try:
            with ThreadPoolExecutor(self.threads, thread_name_prefix="threadmill-task") as pool:
                while not self._stop.is_set():
                    leases: list[Lease] = []
                    unavailable = time.monotonic() < retry_at
                    if not unavailable:
                        free = self.threads - len(futures)
                        if max_tasks is not None:
                            free = min(free, max_tasks - claimed)
                        started = time.monotonic()
                        try:
                            if self.maintenance and started >= next_maintenance:
                                self.run_maintenance()
                                next_maintenance = time.monotonic() + poll
                                self.outage.reached(started)
                            if free > 0:
                                leases = self._claim(free)
                                self.outage.reached(started)
                            failures = 0
                        except BackendUnavailable as exc:
                            unavailable = True
                            failures += 1
                            delay = self.outage.failed(exc, failures, started)
                            retry_at = time.monotonic() + delay
                    claimed += len(leases)
                    for lease in leases:
                        futures.add(pool.submit(self._execute, lease))
                    backing_off = retry_at - time.monotonic()
                    if futures:
                        done, futures = wait(
                            futures,
                            timeout=min(poll, backing_off) if backing_off > 0 else poll,
                            return_when=FIRST_COMPLETED,
                        )
                        for future in done:
                            future.result()  # _execute handles task errors; re-raise our own bugs
                    elif unavailable:  # not "nothing ready": back off and look again
                        self._stop.wait(max(backing_off, 0.0))
                    elif burst or (max_tasks is not None and claimed >= max_tasks):
                        break
                    elif not leases:
                        started = time.monotonic()
                        try:
                            self.backend.wait_for_tasks(self.queues, self.poll_interval)
                            self.outage.reached(started)
                        except BackendUnavailable as exc:
                            failures += 1
                            delay = self.outage.failed(exc, failures, started)
                            retry_at = time.monotonic() + delay
                for future in futures:
                    future.result()
        finally:
            beating.set()
            heartbeat.join()
        return self.processed - processed_before

    def run_maintenance(self) -> None:
        """One reaper pass and one mover pass; `BackendUnavailable` goes to the caller."""
        reap(self.backend, claim_ttl=self.lease_ttl)
        promote(self.backend)

    def _claim(self, limit: int) -> list[Lease]:
        return self.backend.claim(
            self.queues, worker=self.worker_id, lease_ttl=self.lease_ttl, limit=limit
        )

    # --- one task ------------------------------------------------------------------------

    def _execute(self, lease: Lease) -> None:
        record = lease.record
        # One lookup per task: copying the whole registry here would sit on the hot path.
        task = (
            self._tasks.get(record.task_path)
            if self._tasks is not None
            else registered_task(record.task_path)
        )
        if task is None:
            self._quarantine(lease, f"task {record.task_path} is not registered with this worker")
            return
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
                return
            lease = renewed
        context = TaskContext(record=record, attempt=record.attempts, token=lease.token)
        running = _Running(lease, context, task.lease_ttl or self.lease_ttl)
        with self._running_lock:
            self._running[record.id] = running
        try:
            notify("threadmill_task_started", lease=lease)
            log.info(
                "task %s (%s) attempt %d started", record.id, record.task_path, record.attempts
            )
            started = time.monotonic()
            decision = self._call(task, lease, context)
            duration = time.monotonic() - started
            if context.lease_lost:
                log.warning(
                    "task %s (%s) attempt %d finished after its lease was lost; "
                    "outcome not written",
                    record.id, record.task_path, record.attempts,
                )  # fmt: skip
                return
            # Still among the running tasks while the outcome is sent, so that
            # heartbeats keep the lease alive if the backend is unavailable.
            running.acknowledging = True
            self._acknowledge(decision, duration)
        finally:
            with self._running_lock:
                if self._running.get(record.id) is running:
                    del self._running[record.id]

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

    def _deliver(self, decision: Decision) -> TaskResult | None:
        """Send one decision until the backend answers: the stored record, or None if refused.

        While the backend is unavailable the same decision (same lease token)
        is sent again after a backoff. A send that was applied but whose reply
        was lost is recognised by the backend and answered as the first time,
        so a repeat never applies an outcome twice and never reads as a lost
        lease. A lease that really was lost meanwhile is refused: that is the
        only way an outcome is not written.
        """
        failures = 0
        while True:
            started = time.monotonic()
            try:
                # The heartbeat may have renewed the lease meanwhile: same token, so
                # the decision made with the claim's lease is still the current holder's.
                stored = self.backend.decide_many([decision])[0]
            except BackendUnavailable as exc:
                failures += 1
                log.debug("task %s: outcome not delivered (%s); sending it again",
                          decision.lease.task_id, exc)  # fmt: skip
                time.sleep(self.outage.failed(exc, failures, started))
                continue
            self.outage.reached(started)
            return stored

    def _acknowledge(self, decision: Decision, duration: float) -> None:
        stored = self._deliver(decision)
        record = decision.record
        if stored is None:
            log.warning(
                "task %s (%s) attempt %d: acknowledgement refused, the lease was lost",
                record.id, record.task_path, record.attempts,
            )  # fmt: skip
            return
        self.processed += 1
        if decision.retry_delay is not None:
            log.warning(
                "task %s (%s) attempt %d failed after %.3f s (%s); retry in %.3f s",
                record.id, record.task_path, record.attempts, duration,
                record.errors[-1].exception_class_path, decision.retry_delay.total_seconds(),
            )  # fmt: skip
            notify("threadmill_task_retried", record=stored, delay=decision.retry_delay)
            return
        log.info(
            "task %s (%s) attempt %d %s in %.3f s",
            record.id, record.task_path, record.attempts, stored.status.value, duration,
        )  # fmt: skip
        notify("threadmill_task_finished", record=stored)

    def _quarantine(self, lease: Lease, why: str) -> None:
        record = lease.record
        error = TaskError(exception_class_path=QUARANTINE_PATH, message=why)
        failed = attrs.evolve(
            record, status=TaskResultStatus.FAILED, errors=(*record.errors, error)
        )
        log.error("task %s quarantined as FAILED: %s", record.id, why)
        stored = self._deliver(Decision(lease=lease, record=failed))
        if stored is not None:
            self.processed += 1
            notify("threadmill_task_finished", record=stored)

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
        with self._running_lock:
            ttls = [r.lease_ttl for r in self._running.values()]
        return min([self.lease_ttl, *ttls]).total_seconds() / 3

    def heartbeat(self) -> None:
        """Renew the leases of every running task, one `extend_many` call per lease TTL.

        A renewal that is refused means the lease was taken away: the task's
        context says so and its outcome will not be written. An unavailable
        backend is noted in `outage`; the heartbeat thread tries again soon.
        """
        started = time.monotonic()
        try:
            self._beat()
        except BackendUnavailable as exc:
            self.outage.failed(exc, 1, started)
        except Exception:
            log.exception("heartbeat failed; retrying at the next beat")

    def _beat(self) -> None:
        with self._running_lock:
            running = list(self._running.values())
        by_ttl: dict[timedelta, list[_Running]] = {}
        for item in running:
            by_ttl.setdefault(item.lease_ttl, []).append(item)
        for ttl, items in by_ttl.items():
            started = time.monotonic()
            renewed = self.backend.extend_many([i.lease for i in items], ttl)
            self.outage.reached(started)
            with self._running_lock:
                still_running = {id(r) for r in self._running.values()}
            for item, lease in zip(items, renewed, strict=True):
                if id(item) not in still_running:
                    continue  # finished meanwhile: a refusal then means it was acknowledged
                if lease is not None:
                    item.lease = lease
                elif not item.acknowledging and not item.context.lease_lost:
                    item.context.mark_lease_lost()
                    log.warning(
                        "task %s lost its lease (reaped or changed by an operator); "
                        "its outcome will not be written",
                        item.lease.task_id,
                    )
