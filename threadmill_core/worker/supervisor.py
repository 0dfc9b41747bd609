"""The supervisor behind ``threadmill worker``: worker processes plus the maintenance loop.

The supervisor starts `processes` worker processes (each a `Worker` with
`threads` threads, no maintenance of its own), restarts one that dies
(expiring at once the leases it held, for the reaper's next pass: see
`threadmill_core.worker.child_leases`), recycles one after `max_tasks` claims (plus
up to `max_tasks_jitter`, so processes do not all restart at once), and runs
the maintenance loop (reaper and mover) itself. Several supervisors on one
backend are safe: reaper claims are fenced like worker claims.

This module is the supervisor's side. What runs inside a worker process is
`threadmill_core.worker.process`; what both sides use (`WorkerSettings`,
`prepare_process`, `connect_when_reachable`, the exit codes and
`STOP_NOW_SIGNAL`) is `threadmill_core.worker.settings`, and is importable
from here too.

Signals: the first SIGTERM or SIGINT stops claiming everywhere, gives the
prefetched tasks back at once, lets running tasks finish within
`shutdown_timeout`, and exits 0; the last line logged says what stopped it
and how many tasks its worker processes ran (`Supervisor.ran`), as at a
burst's end. A worker process still running tasks then,
or every one at a second signal, is stopped by force (`Worker.stop_now`):
it gives its prefetch back in one call, sends the outcomes waiting for their
batch, logs each running task it abandons and what becomes of it (its lease
expires, and its retry policy decides), and exits with `EXIT_ABANDONED`,
which the supervisor then exits with too. One that has not exited
`FORCED_STOP_GRACE` later is killed. The supervisor tells its worker
processes with SIGTERM (stop) and `STOP_NOW_SIGNAL` (stop now); a worker
process takes any number of SIGTERMs as one request, so a SIGTERM sent to
the whole process group (as systemd does) is one graceful stop.

Process setup and starting worker processes (forked first, spawned after):
see `threadmill_core.worker.pool`.

Outages: when the backend is unavailable (`BackendUnavailable`), nothing
exits or restarts. Each worker process backs off and reconnects on its own
(see `threadmill_core.worker.worker`), and the maintenance loop skips its passes
with the same backoff; each process logs one warning per outage and one
line when the backend is back. Only a configuration error (modules that do
not import, a URL that cannot work, a backend that never answered at start)
stops the supervisor.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import threading
import time
from datetime import timedelta
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import NamedTuple

from threadmill_core.backend import Backend
from threadmill_core.broker import Broker
from threadmill_core.errors import BackendUnavailable
from threadmill_core.models import TaskResultStatus
from threadmill_core.task import registered_tasks
from threadmill_core.worker.child_leases import expire_leases, forget_worker
from threadmill_core.worker.logs import LOG_FORMAT
from threadmill_core.worker.maintenance import promote, reap
from threadmill_core.worker.monitor import Monitor, monitored
from threadmill_core.worker.outage import Outage
from threadmill_core.worker.pool import WorkerProcesses, fork_refusal
from threadmill_core.worker.scheduling import start_scheduler
from threadmill_core.worker.settings import (
    EXIT_ABANDONED,
    EXIT_CONFIG_ERROR,
    EXIT_REPLACE,
    STOP_NOW_SIGNAL,
    WorkerSettings,
    cannot_start,
    connect_when_reachable,
    prepare_process,
    reach_at_start,
)
from threadmill_core.worker.startup import log_start, warn_unregistered_waiting
from threadmill_core.worker.wakeup import Wakeup

__all__ = [
    "EXIT_ABANDONED",
    "EXIT_CONFIG_ERROR",
    "EXIT_REPLACE",
    "FORCED_STOP_GRACE",
    "LOG_FORMAT",
    "STOP_NOW_SIGNAL",
    "Supervisor",
    "WorkerSettings",
    "connect_when_reachable",
    "fork_refusal",
    "prepare_process",
]

log = logging.getLogger("threadmill.supervisor")

#: How long a worker process stopped by force may take to give its prefetch
#: back and exit (two calls to the backend, each made once) before it is killed.
FORCED_STOP_GRACE = timedelta(seconds=10)


class _Left(NamedTuple):
    """What a burst has left in the supervisor's queues (see `Supervisor._left`)."""

    ready: int
    running: int
    #: Seconds until the first DEFERRED task due within the polling interval; None if none is.
    due_in: float | None


class Supervisor(WorkerProcesses):
    """Runs and watches the worker processes and the maintenance loop; see the module doc."""

    def __init__(self, settings: WorkerSettings) -> None:
        self.settings = settings
        self._children: dict[int, BaseProcess] = {}
        self._worker_ids: dict[int, str] = {}  # index -> the worker id of that child
        self._signals = 0
        # Set by the signal handler: a threading.Event could deadlock it (see wakeup.py).
        self._wake = Wakeup()
        self.restarts = 0
        #: Tasks run to an outcome by the worker processes that exited so far (each adds its own).
        self.ran = multiprocessing.get_context("spawn").Value("q", 0)
        self._stopped_by = "burst done: nothing left to run"
        #: The maintenance loop's outages (each worker process has its own).
        self.outage = Outage(log, settings.reconnect_backoff)
        self._failures = 0
        self._retry_at = 0.0
        self._reap_at = 0.0  # time.monotonic() of the reaper's next turn
        self._reap_now = False  # a child's leases were expired: reap before anything else
        self.monitor = Monitor(settings)  # --metrics-port's endpoints

    # --- signals -------------------------------------------------------------------------

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self._signals += 1
        if self._signals == 1:
            self._stopped_by = signal.Signals(signum).name
            log.info("%s: stopping; running tasks get %s to finish",
                     signal.Signals(signum).name, self.settings.shutdown_timeout)  # fmt: skip
            self._stop_children(signal.SIGTERM)
        else:
            log.warning(
                "second signal: stopping now; prefetched tasks go back to READY, running ones "
                "are abandoned (their leases expire and their retry policies decide)"
            )
            self._stop_children(STOP_NOW_SIGNAL)
        self._wake.set()

    def request_stop(self) -> None:
        """What the first SIGTERM does, for embedding and tests."""
        self._on_signal(signal.SIGTERM, None)

    # --- the loop ------------------------------------------------------------------------

    @monitored
    def run(self) -> int:
        """Supervise until stopped (or, in burst mode, until the work is done); the exit code."""
        settings = self.settings
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
        try:
            # The modules load here too, before any worker process starts: a typo
            # fails fast, and the reaper knows the tasks' retry policies. So does
            # the backend (a bad URL fails fast too), and its modules.
            defined = prepare_process(settings)
            log_start(
                url=settings.broker_url,
                queues=settings.queues,
                processes=settings.processes,
                threads=settings.threads,
                prefetch=settings.prefetch,
                defined=defined,
            )
            broker = reach_at_start(
                settings.broker_url, self.outage, self._wake.wait, settings.connect_timeout
            )
        except Exception as exc:
            cannot_start("cannot start", exc)
            return EXIT_CONFIG_ERROR
        if broker is None or self._signals:  # stopped while starting: start no worker
            if broker is not None:
                broker.close()
            return 0 if self._signals <= 1 else 1
        # Looked at before any worker starts, which could claim these tasks first.
        warn_unregistered_waiting(broker.backend, settings.queues, registered_tasks())
        # Closed while the first workers start, so that a forked one shares no connection.
        broker.close()
        self._start_first()
        try:
            broker = self._connect()
        except Exception as exc:
            cannot_start("cannot connect again", exc)
            self._stop_children(signal.SIGTERM)
            self._drain()
            return EXIT_CONFIG_ERROR
        if broker is None:
            return self._stopped(self._drain())
        backend = broker.backend
        # After the fork (a forked child must not inherit the thread); a burst drains, and
        # stores no new ticks. See `scheduling`.
        scheduler = None
        if settings.schedules and not settings.burst:
            kept = settings.kept_schedules
            scheduler = start_scheduler(backend, None if kept is None else kept().values())
        # The children and the signals are looked after every poll interval (that
        # costs the backend nothing); the backend is called when maintenance is due.
        tick = settings.poll_interval.total_seconds()
        next_pass = 0.0  # time.monotonic() of the next maintenance pass
        code = 0
        try:
            while True:
                if time.monotonic() >= next_pass:
                    with self.monitor.calling_backend():
                        wait = self._maintain(backend)  # counted from its return, not its start
                    next_pass = time.monotonic() + wait
                if self._signals:
                    return self._stopped(self._drain())
                with self.monitor.calling_backend():  # a dead child's leases are expired
                    code = self._watch(backend)
                if self._reap_now:  # a child exited holding leases, expired: reap them now
                    self._reap_now = False
                    self._reap_at = next_pass = 0.0
                if code != 0:
                    self._stop_children(signal.SIGTERM)
                    self._drain()
                    return code
                if settings.burst and not self._children:
                    # Ready work gets a worker again; running work (a killed
                    # worker's) waits for the reaper; none of either: done.
                    # Unknown (the backend is unavailable): ask again later.
                    with self.monitor.calling_backend():
                        left = self._left(backend)
                    if left is not None and left.ready:
                        self._start(0)
                    elif left is not None and not left.running and left.due_in is None:
                        return self._stopped(0)
                    elif left is not None and left.due_in is not None:
                        # The mover's pass when it falls due, not at the reaper's turn.
                        next_pass = min(next_pass, time.monotonic() + left.due_in)
                self.monitor.turned(backend)
                self._wake.wait(min(tick, max(next_pass - time.monotonic(), 0.0)))
        finally:
            if scheduler is not None:  # its thread and the event that stops it
                scheduler[1].set()
                scheduler[0].join(timeout=2.0)  # a pass under way ends before the close
            backend.close()

    def _stopped(self, code: int) -> int:
        """Log the last line of a stop or a burst's end: why, and how many tasks ran; `code`."""
        log.info("stopped (%s): %d worker process(es) ran %d task(s) to an outcome, with %d "
                 "restart(s); exit code %d", self._stopped_by, self.settings.processes,
                 self.ran.value, self.restarts, code)  # fmt: skip
        return code

    def _connect(self) -> Broker | None:
        """The supervisor's broker, once the backend is reachable; None if stopped meanwhile."""
        return connect_when_reachable(
            self.settings.broker_url, self.outage, lambda delay: self._wake.wait(delay)
        )

    def _maintain(self, backend: Backend) -> float:
        """One maintenance pass, as far as one is due; returns seconds until the next.

        The reaper runs every `lease_ttl / 3`, so a dead worker's tasks are
        taken up within a third of a lease after theirs expires. The mover
        runs when `Backend.next_due` says a deferred task is due, and the
        next pass is planned for that due time or the reaper's turn,
        whichever comes first: an idle supervisor calls the backend a few
        times per reaper interval, not every poll interval, and deferred
        tasks are promoted when they fall due. A task deferred while the
        loop sleeps, due before its next pass, is promoted at that pass (or
        sooner by a worker's claim: idle workers ask `next_due` too). A
        backend that cannot tell (`next_due` None) gets a reaper and mover
        pass every `min(poll_interval, lease_ttl / 3)`. During an outage,
        its backoff decides when to try again.
        """
        settings = self.settings
        started = time.monotonic()
        if started < self._retry_at:
            return self._retry_at - started
        # For a backend that cannot say when a task falls due: both jobs at this pace.
        interval = min(settings.poll_interval, settings.lease_ttl / 3).total_seconds()
        reaping = started >= self._reap_at
        try:
            if reaping:
                reap(backend, claim_ttl=settings.lease_ttl)
            # After the reaper, whose retries may have deferred tasks.
            due = backend.next_due()
            promoted = promote(backend) if due is None or due <= timedelta(0) else 0
        except BackendUnavailable as exc:
            self._backing_off(exc, started)
            return max(self._retry_at - time.monotonic(), 0.0)
        except Exception:
            log.exception("maintenance pass failed; trying again next interval")
            return interval
        self._failures = 0
        self.outage.reached(started)
        if due is None:  # the reaper on every pass, as the mover
            self._reap_at = 0.0
            return interval
        if reaping:
            self._reap_at = started + (settings.lease_ttl / 3).total_seconds()
        until_reap = max(self._reap_at - time.monotonic(), 0.0)
        if due > timedelta(0):
            return min(due.total_seconds(), until_reap)
        # Promoted some: more may be due (a batch has a limit), so look again at once.
        # Due, yet none promoted (another supervisor was first): look again shortly.
        return 0.0 if promoted else min(interval, until_reap)

    def _backing_off(self, exc: BackendUnavailable, started: float) -> None:
        self._failures += 1
        self._retry_at = time.monotonic() + self.outage.failed(exc, self._failures, started)

    def _watch(self, backend: Backend) -> int:
        """Restart dead or recycled children; 0, or an exit code to stop with.

        The leases a child still held when it exited are expired first, for a
        reaper's pass at once (`threadmill_core.worker.child_leases`).
        """
        for index, process in list(self._children.items()):
            if process.is_alive():
                continue
            code = process.exitcode
            del self._children[index]
            self.monitor.ended(process.pid)  # its gauges go, its counts stay
            worker_id = self._worker_ids.pop(index)
            if expire_leases(backend, log, index, worker_id):
                self._reap_now = True
            forget_worker(backend, log, index, worker_id)
            if code == EXIT_CONFIG_ERROR:
                log.error("worker %d could not start (see above); stopping", index)
                return EXIT_CONFIG_ERROR
            if code == 0 and self.settings.burst:
                continue  # nothing left for it; the loop decides whether all is done
            if code == 0:
                log.info("worker %d recycled after its task budget; restarting", index)
            elif code == EXIT_REPLACE:
                log.warning(
                    "worker %d exited to be replaced: a task did not stop at its hard limit "
                    "(see its log above); starting a fresh process", index,
                )  # fmt: skip
            else:
                log.warning("worker %d died (exit code %s); restarting", index, code)
            self.restarts += 1
            self._start(index)
        return 0

    def _left(self, backend: Backend) -> _Left | None:
        """What is left for a burst in our queues; None while the backend is unavailable."""
        started = time.monotonic()
        try:
            counts = backend.counts()
        except BackendUnavailable as exc:
            self._backing_off(exc, started)
            return None
        mine = [counts[q] for q in self.settings.queues if q in counts]
        ready = sum(c.of(TaskResultStatus.READY) for c in mine)
        running = sum(c.of(TaskResultStatus.RUNNING) for c in mine)
        # A retry falling due within the polling interval (the reaper's, say)
        # is work about to be ready, not work for another day.
        deferred = [c.queue for c in mine if c.of(TaskResultStatus.DEFERRED)]
        due_in: float | None = None
        try:
            if deferred:
                now = backend.now()
                for name in deferred:
                    first = backend.peek(name, TaskResultStatus.DEFERRED, limit=1)
                    run_after = first[0].run_after if first else None
                    if run_after is not None and run_after <= now + self.settings.poll_interval:
                        seconds = max((run_after - now).total_seconds(), 0.0)
                        due_in = seconds if due_in is None else min(due_in, seconds)
        except BackendUnavailable as exc:
            self._backing_off(exc, started)
            return None
        self.outage.reached(started)
        return _Left(ready=ready, running=running, due_in=due_in)

    def _drain(self) -> int:
        """Wait for the children to finish, up to the shutdown timeout; the exit code.

        Children still running then (or all of them at a second signal) are
        stopped by force: `STOP_NOW_SIGNAL`, which makes each give its
        prefetch back and abandon its running tasks (`Worker.stop_now`). One
        still alive `FORCED_STOP_GRACE` after that is killed. `EXIT_ABANDONED`
        when a running task was abandoned (a child says so with that code, or
        had to be killed); else 0, or 1 after a second signal.
        """
        deadline = time.monotonic() + self.settings.shutdown_timeout.total_seconds()
        forced_at: float | None = None
        killed = False
        while alive := [p for p in self._children.values() if p.is_alive()]:
            self.monitor.draining()
            now = time.monotonic()
            if forced_at is None and self._signals > 1:
                forced_at = now  # `_on_signal` told them already
            elif forced_at is None and now >= deadline:
                log.warning(
                    "%d worker(s) still running tasks after the shutdown timeout (%s): "
                    "stopping them now; their running tasks are abandoned (their leases expire "
                    "and their retry policies decide)", len(alive), self.settings.shutdown_timeout,
                )  # fmt: skip
                self._stop_children(STOP_NOW_SIGNAL)
                forced_at = now
            if forced_at is not None and now >= forced_at + FORCED_STOP_GRACE.total_seconds():
                log.warning(
                    "%d worker(s) did not stop within %s of being told to: killed; their tasks "
                    "go back to READY or meet their retry policies when their leases expire",
                    len(alive), FORCED_STOP_GRACE,
                )  # fmt: skip
                self._stop_children(signal.SIGKILL)
                for process in alive:
                    process.join()
                killed = True
                break
            limit = deadline if forced_at is None else forced_at + FORCED_STOP_GRACE.total_seconds()
            if self._wake.wait(max(min(limit - now, 0.1), 0.0)):
                self._wake.clear()
        abandoned = killed or any(p.exitcode == EXIT_ABANDONED for p in self._children.values())
        self._children.clear()
        if abandoned:
            return EXIT_ABANDONED
        return 0 if self._signals <= 1 else 1
