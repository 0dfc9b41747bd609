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
"""

from __future__ import annotations

import asyncio
import logging
import os
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
from threadmill_core.errors import TaskQuarantined, UnsupportedValue
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
from threadmill_core.retry import decide
from threadmill_core.task import Task, registered_tasks, validate_queue

log = logging.getLogger("threadmill.worker")

QUARANTINE_PATH = f"{TaskQuarantined.__module__}.{TaskQuarantined.__qualname__}"


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@attrs.define
class _Running:
    lease: Lease
    context: TaskContext
    lease_ttl: timedelta


class Worker:
    """Claims tasks from `queues` (in that order of preference) and runs them on `threads` threads.

    `lease_ttl` is how long a claim lives without a heartbeat (a task's own
    ``lease_ttl`` option overrides it). `poll_interval` bounds how long an
    idle worker waits before looking again (for deferred tasks falling due,
    on backends that cannot wake it). `tasks` is the registry of tasks this
    worker may run, by path; by default, every task registered in this
    process.
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
        try:
            with ThreadPoolExecutor(self.threads, thread_name_prefix="threadmill-task") as pool:
                while not self._stop.is_set():
                    if self.maintenance and time.monotonic() >= next_maintenance:
                        self.run_maintenance()
                        next_maintenance = time.monotonic() + self.poll_interval.total_seconds()
                    free = self.threads - len(futures)
                    if max_tasks is not None:
                        free = min(free, max_tasks - claimed)
                    leases = self._claim(free) if free > 0 else []
                    claimed += len(leases)
                    for lease in leases:
                        futures.add(pool.submit(self._execute, lease))
                    if futures:
                        done, futures = wait(
                            futures,
                            timeout=self.poll_interval.total_seconds(),
                            return_when=FIRST_COMPLETED,
                        )
                        for future in done:
                            future.result()  # _execute handles task errors; re-raise our own bugs
                    elif burst or (max_tasks is not None and claimed >= max_tasks):
                        break
                    elif not leases:
                        self.backend.wait_for_tasks(self.queues, self.poll_interval)
                for future in futures:
                    future.result()
        finally:
            beating.set()
            heartbeat.join()
        return self.processed - processed_before

    def run_maintenance(self) -> None:
        """One reaper pass and one mover pass."""
        reap(self.backend, claim_ttl=self.lease_ttl)
        promote(self.backend)

    def _claim(self, limit: int) -> list[Lease]:
        return self.backend.claim(
            self.queues, worker=self.worker_id, lease_ttl=self.lease_ttl, limit=limit
        )

    # --- one task ------------------------------------------------------------------------

    def _execute(self, lease: Lease) -> None:
        record = lease.record
        task = self.tasks().get(record.task_path)
        if task is None:
            self._quarantine(lease, f"task {record.task_path} is not registered with this worker")
            return
        if task.lease_ttl is not None and task.lease_ttl != self.lease_ttl:
            renewed = self.backend.extend(lease, task.lease_ttl)
            if renewed is None:
                log.warning("task %s: lease lost before it started; not run", record.id)
                return
            lease = renewed
        context = TaskContext(record=record, attempt=record.attempts, token=lease.token)
        running = _Running(lease, context, task.lease_ttl or self.lease_ttl)
        with self._running_lock:
            self._running[record.id] = running
        notify("threadmill_task_started", lease=lease)
        log.info("task %s (%s) attempt %d started", record.id, record.task_path, record.attempts)
        started = time.monotonic()
        try:
            decision = self._call(task, lease, context)
        finally:
            with self._running_lock:
                self._running.pop(record.id, None)
        duration = time.monotonic() - started
        if context.lease_lost:
            log.warning(
                "task %s (%s) attempt %d finished after its lease was lost; outcome not written",
                record.id, record.task_path, record.attempts,
            )  # fmt: skip
            return
        self._acknowledge(decision, duration)

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

    def _acknowledge(self, decision: Decision, duration: float) -> None:
        # The heartbeat may have renewed the lease meanwhile: same token, so the
        # decision made with the claim's lease is still the current holder's.
        stored = self.backend.decide_many([decision])[0]
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
        stored: TaskResult | None = self.backend.complete(lease, failed)
        if stored is not None:
            self.processed += 1
            notify("threadmill_task_finished", record=stored)

    # --- heartbeats ----------------------------------------------------------------------

    def _heartbeat_loop(self, done: threading.Event) -> None:
        # Runs until `run` has drained its tasks, not just until stop(): a
        # graceful shutdown must keep the leases of finishing tasks alive.
        while not done.wait(self._heartbeat_interval()):
            self.heartbeat()

    def _heartbeat_interval(self) -> float:
        with self._running_lock:
            ttls = [r.lease_ttl for r in self._running.values()]
        return min([self.lease_ttl, *ttls]).total_seconds() / 3

    def heartbeat(self) -> None:
        """Renew the leases of every running task, one `extend_many` call per lease TTL."""
        with self._running_lock:
            running = list(self._running.values())
        by_ttl: dict[timedelta, list[_Running]] = {}
        for item in running:
            by_ttl.setdefault(item.lease_ttl, []).append(item)
        for ttl, items in by_ttl.items():
            try:
                renewed = self.backend.extend_many([i.lease for i in items], ttl)
            except Exception:
                log.exception("heartbeat failed; retrying at the next beat")
                continue
            with self._running_lock:
                still_running = {id(r) for r in self._running.values()}
            for item, lease in zip(items, renewed, strict=True):
                if id(item) not in still_running:
                    continue  # finished meanwhile: a refusal then means it was acknowledged
                if lease is None:
                    if not item.context.lease_lost:
                        item.context.mark_lease_lost()
                        log.warning(
                            "task %s lost its lease (reaped or changed by an operator); "
                            "its outcome will not be written",
                            item.lease.task_id,
                        )
                else:
                    item.lease = lease
