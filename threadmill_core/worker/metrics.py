"""Prometheus metrics of a worker command: a plugin on the lifecycle hooks.

Imported only by ``threadmill worker --metrics-port`` (`install`, in the
supervisor and in each worker process), after the supervisor has set
``PROMETHEUS_MULTIPROC_DIR`` (see `threadmill_core.worker.monitor`): every process
writes its values to files there, and the supervisor's ``/metrics`` adds
them up. A worker without ``--metrics-port`` never imports this module nor
``prometheus_client``, and registers no hook.

What is counted (labels ``queue`` and ``task``; ``task`` is the task's path
when this process registered that task, else ``unregistered``, so a record
naming any path cannot add a series; ids are never labels):

- ``threadmill_tasks_enqueued_total``: tasks these processes enqueued
  (follow-up tasks enqueued by tasks; producers elsewhere count their own);
- ``threadmill_tasks_started_total``: attempts started;
- ``threadmill_tasks_finished_total`` (and ``status``: ``successful`` or
  ``failed``, by a worker or by the reaper, or ``cancelled``: a claimed task
  a cancel request stopped, before it started or while it ran): tasks finished;
- ``threadmill_tasks_retried_total``: failed attempts (or expired leases)
  sent back for another attempt;
- ``threadmill_leases_expired_total``: leases the reaper took over;
- ``threadmill_tasks_quarantined_total``: tasks quarantined (FAILED with a
  `TaskQuarantined` error without running: counted in ``finished`` as
  ``failed`` too). Corrupt records a backend quarantines inside its own
  scripts never reach a process and are not counted here;
- ``threadmill_tasks_given_back_total``: claimed tasks given back uncharged
  without running (a stopping worker's prefetch, what an adaptive prefetch
  shrunk by long tasks no longer holds, a task not loaded here);
- ``threadmill_task_run_seconds`` (histogram): how long each attempt ran,
  observed when its outcome was acknowledged;
- ``threadmill_tasks_running`` and ``threadmill_tasks_prefetched`` (gauges,
  the sum over the live worker processes), set each time a worker's loop
  turns (`Worker.census`, at least every poll interval);
- ``threadmill_worker_loop_turned_timestamp_seconds`` (gauge per live
  worker process, label ``pid``): when its loop last turned, Unix time;
  ``/healthz`` reads it.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge, Histogram, values

from threadmill_core.hookspecs import hookimpl
from threadmill_core.models import TaskResult, TaskResultStatus
from threadmill_core.plugins import register_plugin
from threadmill_core.task import registered_task
from threadmill_core.worker.execution import QUARANTINE_PATH

if TYPE_CHECKING:
    from threadmill_core.models import Lease
    from threadmill_core.worker import Worker

#: The name the plugin is registered under.
PLUGIN_NAME = "threadmill-metrics"
#: The ``task`` label of a task this process has not registered.
UNREGISTERED = "unregistered"
#: The name of the loop-turn gauge (`threadmill_core.worker.monitor` reads it).
LOOP_TURNED = "threadmill_worker_loop_turned_timestamp_seconds"
#: Most start times kept for attempts whose outcome never came (lease lost): a bound.
_MAX_STARTS = 100_000

_TASK = ("queue", "task")

# prometheus_client picks where values go when it is first imported: an app's
# setup may have imported it before the supervisor set PROMETHEUS_MULTIPROC_DIR.
# Picked again then, before the metrics below are made: the worker command owns
# its process, and its metrics (and the app's made from now on) must reach the
# shared files.
if values.ValueClass is values.MutexValue and os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]  # untyped

ENQUEUED = Counter(
    "threadmill_tasks_enqueued", "Tasks enqueued by this worker command's processes.", _TASK,
    registry=None,
)  # fmt: skip
STARTED = Counter("threadmill_tasks_started", "Attempts started.", _TASK, registry=None)
FINISHED = Counter(
    "threadmill_tasks_finished", "Tasks finished (SUCCESSFUL, FAILED or CANCELLED), by status.",
    (*_TASK, "status"), registry=None,
)  # fmt: skip
RETRIED = Counter(
    "threadmill_tasks_retried", "Failed attempts sent back for another attempt.", _TASK,
    registry=None,
)  # fmt: skip
EXPIRED = Counter(
    "threadmill_leases_expired", "Expired leases the reaper took over.", _TASK, registry=None
)
QUARANTINED = Counter(
    "threadmill_tasks_quarantined", "Tasks quarantined as FAILED without running.", _TASK,
    registry=None,
)  # fmt: skip
GIVEN_BACK = Counter(
    "threadmill_tasks_given_back", "Claimed tasks given back uncharged without running.",
    _TASK, registry=None,
)  # fmt: skip
RUN_SECONDS = Histogram(
    "threadmill_task_run_seconds", "How long attempts ran, until their outcome.", _TASK,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
    registry=None,
)  # fmt: skip
RUNNING = Gauge(
    "threadmill_tasks_running", "Tasks running now.", registry=None, multiprocess_mode="livesum"
)
PREFETCHED = Gauge(
    "threadmill_tasks_prefetched", "Claimed tasks waiting for a thread.", registry=None,
    multiprocess_mode="livesum",
)  # fmt: skip


@functools.cache
def _turned() -> Gauge:
    """The loop-turn gauge, made at a worker's first turn: the supervisor reports none."""
    return Gauge(
        LOOP_TURNED, "When each worker process's loop last turned (Unix time).", registry=None,
        multiprocess_mode="liveall",
    )  # fmt: skip


class MetricsPlugin:
    """Counts the lifecycle hooks into the metrics above; one per process.

    Fast path: a hook only adds to this process's tallies (a dict,
    under a lock); `flush` writes them to the metrics, and so to the shared
    files, at each turn of a worker's loop (`threadmill_worker_ticked`, the
    last turn included, after the last outcome was sent) and before the
    supervisor answers a scrape. So ``/metrics`` is at most a poll interval
    behind, and a worker process stopped by force or killed loses at most
    its last interval's tallies. See docs/hot-paths.md.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: Events not yet written, by counter and label values.
        self._counts: dict[tuple[Counter, tuple[str, ...]], int] = {}
        #: Run times not yet written: (queue, task) and seconds.
        self._runs: list[tuple[tuple[str, str], float]] = []
        #: `time.monotonic()` at each running attempt's start, by task id.
        self._started: dict[str, float] = {}
        #: The ``task`` label of each registered task path seen (never an unregistered one:
        #: a task module imported later registers it).
        self._tasks: dict[str, str] = {}

    def _labels(self, record: TaskResult) -> tuple[str, str]:
        path = record.task_path
        label = self._tasks.get(path)
        if label is None:
            if registered_task(path) is None:
                return record.queue, UNREGISTERED
            label = self._tasks[path] = path
        return record.queue, label

    def _count(self, metric: Counter, labels: tuple[str, ...]) -> None:
        key = (metric, labels)
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1

    def forget(self) -> None:
        """Drop every tally: a forked process starts with none of its parent's."""
        self._lock = threading.Lock()
        self._counts, self._runs, self._started = {}, [], {}

    def flush(self) -> None:
        """Write the tallies since the last flush to the metrics (the shared files)."""
        with self._lock:
            counts, self._counts = self._counts, {}
            runs, self._runs = self._runs, []
        for (metric, labels), count in counts.items():
            metric.labels(*labels).inc(count)
        histograms: dict[tuple[str, str], Histogram] = {}
        for labels, seconds in runs:
            histogram = histograms.get(labels)
            if histogram is None:
                histogram = histograms[labels] = RUN_SECONDS.labels(*labels)
            histogram.observe(seconds)

    @hookimpl
    def threadmill_task_enqueued(self, record: TaskResult) -> None:
        self._count(ENQUEUED, self._labels(record))

    @hookimpl
    def threadmill_task_started(self, lease: Lease) -> None:
        record = lease.record
        labels = self._labels(record)
        now = time.monotonic()
        with self._lock:
            key = (STARTED, labels)
            self._counts[key] = self._counts.get(key, 0) + 1
            if len(self._started) >= _MAX_STARTS:
                self._started.clear()
            self._started[record.id] = now

    def _ran(self, record: TaskResult, labels: tuple[str, str], metric: Counter,
             counted: tuple[str, ...]) -> None:  # fmt: skip
        now = time.monotonic()
        with self._lock:
            key = (metric, counted)
            self._counts[key] = self._counts.get(key, 0) + 1
            started = self._started.pop(record.id, None)
            if started is not None:
                self._runs.append((labels, now - started))

    @hookimpl
    def threadmill_task_finished(self, record: TaskResult) -> None:
        labels = self._labels(record)
        self._ran(record, labels, FINISHED, (*labels, record.status.value.lower()))
        # FAILED by this decision: a task requeued after a quarantine keeps that error
        # last, and its success (or cancel) is not a second quarantine.
        if (
            record.status is TaskResultStatus.FAILED
            and record.errors
            and record.errors[-1].exception_class_path == QUARANTINE_PATH
        ):
            self._count(QUARANTINED, labels)

    @hookimpl
    def threadmill_task_retried(self, record: TaskResult, delay: timedelta) -> None:
        labels = self._labels(record)
        self._ran(record, labels, RETRIED, labels)

    @hookimpl
    def threadmill_lease_expired(self, record: TaskResult) -> None:
        self._count(EXPIRED, self._labels(record))

    @hookimpl
    def threadmill_tasks_given_back(self, records: Sequence[TaskResult]) -> None:
        for record in records:
            self._count(GIVEN_BACK, self._labels(record))

    @hookimpl
    def threadmill_worker_ticked(self, worker: Worker) -> None:
        self.flush()
        prefetched, running = worker.census()
        PREFETCHED.set(prefetched)
        RUNNING.set(running)
        _turned().set(time.time())


def install() -> None:
    """Register the metrics plugin in this process (again: nothing happens).

    ``PROMETHEUS_MULTIPROC_DIR`` must be set before this module is imported.
    """
    register_plugin(PLUGIN, PLUGIN_NAME)


def flush() -> None:
    """Write this process's tallies to the shared files (`MetricsPlugin.flush`)."""
    PLUGIN.flush()


PLUGIN = MetricsPlugin()
# A worker process forked from the supervisor must not count the supervisor's tallies again.
os.register_at_fork(after_in_child=PLUGIN.forget)
