"""Prometheus metrics of a worker command: a plugin on the lifecycle hooks.

Imported only by ``threadmill worker --metrics-port`` (`install`, in the
supervisor and in each worker process), after the supervisor has set
``PROMETHEUS_MULTIPROC_DIR`` (see `threadmill_core.monitor`): every process
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
  ``failed``): tasks finished by a worker or by the reaper;
- ``threadmill_tasks_retried_total``: failed attempts (or expired leases)
  sent back for another attempt;
- ``threadmill_leases_expired_total``: leases the reaper took over;
- ``threadmill_tasks_quarantined_total``: tasks quarantined (FAILED with a
  `TaskQuarantined` error without running: counted in ``finished`` as
  ``failed`` too). Corrupt records a backend quarantines inside its own
  scripts never reach a process and are not counted here;
- ``threadmill_tasks_given_back_total``: claimed tasks given back uncharged
  without running (a stopping worker's prefetch, a task not loaded here);
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

from threadmill_core.execution import QUARANTINE_PATH
from threadmill_core.hookspecs import hookimpl
from threadmill_core.models import TaskResult
from threadmill_core.plugins import register_plugin
from threadmill_core.task import registered_task

if TYPE_CHECKING:
    from threadmill_core.models import Lease
    from threadmill_core.worker import Worker

#: The name the plugin is registered under.
PLUGIN_NAME = "threadmill-metrics"
#: The ``task`` label of a task this process has not registered.
UNREGISTERED = "unregistered"
#: The name of the loop-turn gauge (`threadmill_core.monitor` reads it).
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
    "threadmill_tasks_finished", "Tasks finished (SUCCESSFUL or FAILED), by status.",
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


def _labels(record: TaskResult) -> tuple[str, str]:
    path = record.task_path
    return record.queue, path if registered_task(path) is not None else UNREGISTERED


class MetricsPlugin:
    """Counts the lifecycle hooks into the metrics above; one per process."""

    def __init__(self) -> None:
        #: `time.monotonic()` at each running attempt's start, by task id.
        self._started: dict[str, float] = {}
        self._lock = threading.Lock()

    @hookimpl
    def threadmill_task_enqueued(self, record: TaskResult) -> None:
        ENQUEUED.labels(*_labels(record)).inc()

    @hookimpl
    def threadmill_task_started(self, lease: Lease) -> None:
        STARTED.labels(*_labels(lease.record)).inc()
        with self._lock:
            if len(self._started) >= _MAX_STARTS:
                self._started.clear()
            self._started[lease.record.id] = time.monotonic()

    def _ran(self, record: TaskResult, labels: tuple[str, str]) -> None:
        with self._lock:
            started = self._started.pop(record.id, None)
        if started is not None:
            RUN_SECONDS.labels(*labels).observe(time.monotonic() - started)

    @hookimpl
    def threadmill_task_finished(self, record: TaskResult) -> None:
        labels = _labels(record)
        FINISHED.labels(*labels, record.status.value.lower()).inc()
        if record.errors and record.errors[-1].exception_class_path == QUARANTINE_PATH:
            QUARANTINED.labels(*labels).inc()
        self._ran(record, labels)

    @hookimpl
    def threadmill_task_retried(self, record: TaskResult, delay: timedelta) -> None:
        labels = _labels(record)
        RETRIED.labels(*labels).inc()
        self._ran(record, labels)

    @hookimpl
    def threadmill_lease_expired(self, record: TaskResult) -> None:
        EXPIRED.labels(*_labels(record)).inc()

    @hookimpl
    def threadmill_tasks_given_back(self, records: Sequence[TaskResult]) -> None:
        for record in records:
            GIVEN_BACK.labels(*_labels(record)).inc()

    @hookimpl
    def threadmill_worker_ticked(self, worker: Worker) -> None:
        prefetched, running = worker.census()
        PREFETCHED.set(prefetched)
        RUNNING.set(running)
        _turned().set(time.time())


def install() -> None:
    """Register the metrics plugin in this process (again: nothing happens).

    ``PROMETHEUS_MULTIPROC_DIR`` must be set before this module is imported.
    """
    register_plugin(_PLUGIN, PLUGIN_NAME)


_PLUGIN = MetricsPlugin()
