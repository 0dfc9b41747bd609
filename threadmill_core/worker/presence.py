"""A worker's live entry in the backend: registered, refreshed each beat, removed at the end.

`Worker.run` calls `Presence.arrive` before its threads start and
`Presence.leave` once they have exited; the heartbeat calls
`Presence.refresh` after renewing the leases, one `Backend.register_worker`
per beat whatever the worker holds. The entry lives the worker's
`lease_ttl` after each refresh: beats come at least three times in that
time (see `threadmill_core.worker.heartbeat.beat_interval`). See
`threadmill_core.live_workers`.

Being listed is for operators, never for the work: a registration or a
removal that fails is logged and the worker goes on (a refresh that finds
the backend unavailable is part of the beat's outage; the next beat tries
again). A worker whose removal failed is listed until its entry lapses.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import time
from datetime import UTC, datetime, timedelta
from importlib import metadata

from threadmill_core.backend import Backend
from threadmill_core.errors import BackendUnavailable
from threadmill_core.live_workers import RunningTask, WorkerInfo
from threadmill_core.worker.held import HeldTasks
from threadmill_core.worker.outage import Outage

log = logging.getLogger("threadmill.worker")


@functools.cache
def threadmill_version() -> str:
    """The installed threadmill's version, or ``"unknown"`` when it is not installed."""
    try:
        return metadata.version("threadmill")
    except metadata.PackageNotFoundError:
        return "unknown"


class Presence:
    """The live entry of the worker `worker_id` (see the module doc)."""

    def __init__(
        self,
        backend: Backend,
        held: HeldTasks,
        *,
        worker_id: str,
        queues: list[str],
        threads: int,
        ttl: timedelta,
    ) -> None:
        self.backend = backend
        self.held = held
        self.worker_id = worker_id
        self.queues = tuple(queues)
        self.threads = threads
        self.ttl = ttl
        self.started_at = datetime.now(UTC)
        self.host = socket.gethostname()

    def info(self) -> WorkerInfo:
        """The entry as it stands now: the tasks running now among those held."""
        running = tuple(
            RunningTask(task.lease.task_id, task.lease.record.task_path)
            for task in self.held.all()
            if task.started
        )
        return WorkerInfo(
            id=self.worker_id,
            host=self.host,
            pid=os.getpid(),
            queues=self.queues,
            threads=self.threads,
            version=threadmill_version(),
            started_at=self.started_at,
            running=running,
        )

    def refresh(self) -> None:
        """Store the entry as it stands now; the backend's errors raise (the beat's to handle)."""
        self.backend.register_worker(self.info(), self.ttl)

    def arrive(self, outage: Outage) -> None:
        """Register, as a run begins; a failure is logged (the first beat tries again), an
        unavailable backend as part of `outage` (one line for the whole outage)."""
        started = time.monotonic()
        try:
            self.refresh()
            outage.reached(started)
        except BackendUnavailable as exc:
            outage.failed(exc, 1, started)
        except Exception as exc:
            log.warning(
                "worker %s could not register itself (%s: %s); its heartbeat tries again",
                self.worker_id, type(exc).__name__, exc,
            )  # fmt: skip

    def leave(self) -> None:
        """Remove the entry, as a run ends; a failure is logged (the entry then lapses)."""
        try:
            self.backend.unregister_worker(self.worker_id)
        except Exception as exc:
            log.warning(
                "worker %s could not remove its entry (%s: %s); it lapses within %s",
                self.worker_id, type(exc).__name__, exc, self.ttl,
            )  # fmt: skip
