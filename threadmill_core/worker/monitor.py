"""``threadmill worker --metrics-port``: ``/metrics``, ``/healthz`` and ``/readyz`` on one port.

The supervisor owns the endpoints (`monitored` wraps `Supervisor.run`):

- before anything else, it checks that the port can be bound (a port in
  use ends the command with one line and exit code 3, before any process
  starts), makes a private temporary directory and sets
  ``PROMETHEUS_MULTIPROC_DIR`` to it, so that every process of the command
  (the supervisor, and the worker processes it forks or spawns, which
  inherit the variable) writes its metrics there (`threadmill_core.worker.metrics`);
- once the first worker processes have started (a thread started before
  would keep them from being forked), at the first turn of its loop, it
  serves the endpoints from a thread;
- at the end, it stops serving, removes the directory and restores the
  variable.

``/metrics`` adds up every process's files (``prometheus_client``'s
multiprocess collector), the gauges of worker processes that died left out
(``mark_process_dead``, as soon as the supervisor finds each dead: `Monitor.ended`),
plus what only the supervisor knows:
``threadmill_queue_tasks{queue,status}``, the tasks in each segment of the
command's queues from `Backend.counts`, asked at most every
`DEPTH_INTERVAL` and only when scraped, and ``threadmill_worker_processes``,
the live worker processes.

``/healthz`` answers 200 while the supervisor's loop and every live worker
process's loop have turned within `stall_bound` (each turns at least every
poll interval: see ``threadmill_worker_ticked``); a process that has not
turned yet gets that long from when it was first seen. Else 503, with a
line per process that is stuck. A stopped process, a deadlocked worker, a
task holding the interpreter's lock: all stop a loop. The supervisor's
loop waiting in its backend calls (`Monitor.calling_backend`: the reaper,
the mover, a dead child's leases) is not stuck, up to `CALL_BOUND` a call
(`supervisor_stall`): a backend that does not answer is an outage, which
``/readyz`` reports, and the driver's timeouts end such calls sooner.
The supervisor's wait for its worker processes at a graceful stop
(`Monitor.draining`) turns its loop too. ``/readyz`` answers 200
while the backend answers (`threadmill_core.worker.health.Readiness`), else 503
saying why. Both bodies are plain text.

The endpoints bind `WorkerSettings.metrics_host`, 127.0.0.1 by default: they
have no authentication and show task names and queue sizes, so a host's
other interfaces get them only when asked. In a container, whose probes
and scrapes come from outside it, give ``--metrics-host 0.0.0.0``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from threadmill_core.errors import ThreadmillError
from threadmill_core.models import TaskResultStatus
from threadmill_core.worker.health import Readiness

if TYPE_CHECKING:
    from threadmill_core.backend import Backend
    from threadmill_core.models import QueueCounts
    from threadmill_core.worker.settings import WorkerSettings
    from threadmill_core.worker.supervisor import Supervisor

log = logging.getLogger("threadmill.supervisor")

ENV = "PROMETHEUS_MULTIPROC_DIR"
#: The least time a loop may go without turning before ``/healthz`` calls it stuck.
STALL_FLOOR = timedelta(seconds=5)
#: Seconds the supervisor's loop may wait in one backend call before ``/healthz`` calls it
#: stuck: longer than the drivers' timeouts let a call of an outage take (redis-py 8:
#: three tries of 5 s; PostgreSQL: a 10 s connect timeout).
CALL_BOUND = 120.0
#: The queue-depth gauges are read from the backend at most this often.
DEPTH_INTERVAL = 5.0


def stall_bound(poll_interval: timedelta) -> float:
    """Seconds a loop may go without turning: three poll intervals, at least `STALL_FLOOR`."""
    return max(STALL_FLOOR, poll_interval * 3).total_seconds()


def supervisor_stall(idle: float, calling: float | None, bound: float) -> str | None:
    """What ``/healthz`` says of the supervisor's loop, idle for `idle` seconds and waiting in
    a backend call for `calling` seconds (None: in none); None while it is healthy.

    Waiting on the backend is an outage, not a stall (``/readyz`` reports the
    backend), as long as the driver's timeouts could make a call last:
    `CALL_BOUND`. A call that has not returned by then hangs on a connection
    that no timeout will end (redis-py before 8 sets none), which a restart
    does mend.
    """
    if calling is not None:
        if calling > max(bound, CALL_BOUND):
            return f"supervisor: a call to the backend has not returned for {calling:.1f} s"
        return None
    if idle > bound:
        return f"supervisor: its loop has not turned for {idle:.1f} s"
    return None


class MetricsPortUnavailable(ThreadmillError, OSError):
    """The metrics port cannot be bound (in use, or not allowed)."""


def _bind_check(host: str, port: int) -> None:
    """Raise `MetricsPortUnavailable` unless (`host`, `port`) can be bound now."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise MetricsPortUnavailable(
                f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}"
            ) from exc


class Monitor:
    """The endpoints of one supervisor; does nothing when `metrics_port` is None."""

    def __init__(self, settings: WorkerSettings) -> None:
        self.settings = settings
        self.failed = False
        self._directory: str | None = None
        self._previous: str | None = None
        self._server: _Server | None = None
        self._supervisor: Supervisor | None = None
        self._turned = time.monotonic()
        #: `time.monotonic()` when the supervisor's loop began the backend calls it waits in;
        #: None outside them.
        self._calling: float | None = None
        self._lock = threading.Lock()
        self._seen: dict[int, float] = {}  # worker pid -> time.monotonic() first seen
        self._depth: tuple[float, dict[str, QueueCounts] | None] = (float("-inf"), None)
        #: Held while the backend is asked the depth, which may take the driver's timeouts:
        #: never `_lock`, which /healthz and the supervisor's loop take.
        self._depth_lock = threading.Lock()
        self._backend: Backend | None = None
        self._readiness: Readiness | None = None

    def open(self, supervisor: Supervisor) -> None:
        """Check the port, make the directory and set ``PROMETHEUS_MULTIPROC_DIR``."""
        port = self.settings.metrics_port
        if port is None:
            return
        _bind_check(self.settings.metrics_host, port)
        self._supervisor = supervisor
        self._directory = tempfile.mkdtemp(prefix="threadmill-metrics-")
        self._previous = os.environ.get(ENV)
        os.environ[ENV] = self._directory

    def draining(self) -> None:
        """The supervisor's loop turned while it waits for its worker processes to stop: a
        graceful stop waiting for running tasks is not a stall."""
        self._turned = time.monotonic()

    def turned(self, backend: Backend) -> None:
        """The supervisor's loop turned; the first time, serve (the worker processes are up)."""
        self._turned = time.monotonic()
        if self._directory is None or self._server is not None or self.failed:
            return
        host, port = self.settings.metrics_host, self.settings.metrics_port
        assert port is not None  # a directory is made only with a port
        try:
            server = (_Server6 if ":" in host else _Server)((host, port), _Handler)
        except OSError as exc:  # taken since `open` checked it
            log.error("cannot serve metrics on %s:%s: %s; stopping", host, port, exc.strerror)
            self.failed = True
            assert self._supervisor is not None
            self._supervisor.request_stop()
            return
        server.monitor = self
        self._backend = backend
        self._readiness = Readiness(backend)
        self._server = server
        # Polls for `close` every 0.1 s (not the default 0.5 s): a burst's end waits for it.
        serving = threading.Thread(
            target=server.serve_forever, args=(0.1,), name="threadmill-metrics"
        )
        serving.daemon = True
        serving.start()
        log.info("serving /metrics, /healthz and /readyz on http://%s:%d", host, port)

    def close(self) -> None:
        """Stop serving, remove the directory and restore ``PROMETHEUS_MULTIPROC_DIR``."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None
            if self._previous is None:
                os.environ.pop(ENV, None)
            else:
                os.environ[ENV] = self._previous

    @contextlib.contextmanager
    def calling_backend(self) -> Iterator[None]:
        """The supervisor's loop calls the backend meanwhile: waiting on it is an outage (see
        /readyz), not a stall, however long the driver's timeouts let a call take."""
        self._calling = time.monotonic()
        try:
            yield
        finally:
            self._turned = time.monotonic()  # before: a reader seeing None sees this turn
            self._calling = None

    def ended(self, pid: int | None) -> None:
        """Worker process `pid` exited: drop its gauges now, whether or not a request to the
        endpoints saw it alive (one that lived between two scrapes would keep them forever)."""
        if self._directory is None or pid is None:
            return
        from prometheus_client import multiprocess

        with self._lock:
            multiprocess.mark_process_dead(pid, self._directory)  # type: ignore[no-untyped-call]  # prometheus_client's multiprocess module is untyped
            self._seen.pop(pid, None)

    # --- what the endpoints say ------------------------------------------------------------

    def _live(self) -> list[int]:
        """The live worker processes' pids; the gauges of those that died are dropped."""
        from prometheus_client import multiprocess

        assert self._supervisor is not None
        pids = self._supervisor.pids()
        now = time.monotonic()
        with self._lock:
            for pid in set(self._seen) - set(pids):
                multiprocess.mark_process_dead(pid, self._directory)  # type: ignore[no-untyped-call]  # prometheus_client's multiprocess module is untyped
                del self._seen[pid]
            for pid in pids:
                self._seen.setdefault(pid, now)
        return pids

    def metrics(self) -> bytes:
        from prometheus_client import CollectorRegistry, generate_latest, multiprocess

        from threadmill_core.worker.metrics import flush

        flush()  # the supervisor's own events (the reaper's)

        live = self._live()
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, self._directory)  # type: ignore[no-untyped-call]  # prometheus_client's multiprocess module is untyped
        registry.register(_SupervisorCollector(len(live), self._queue_depth))
        return generate_latest(registry)

    def unready(self) -> str | None:
        """``/readyz``: why the backend is not ready; None when it answers."""
        assert self._readiness is not None  # made before serving
        return self._readiness.problem()

    def _queue_depth(self) -> dict[str, QueueCounts] | None:
        """`Backend.counts` of the command's queues, asked at most every `DEPTH_INTERVAL`;
        None while the backend does not answer."""
        with self._depth_lock:
            asked, counts = self._depth
            if time.monotonic() - asked < DEPTH_INTERVAL:
                return counts
            try:
                assert self._backend is not None  # set before serving
                every = self._backend.counts()
                counts = {q: every[q] for q in self.settings.queues if q in every}
            except Exception as exc:
                log.debug("queue depth for /metrics: %s: %s", type(exc).__name__, exc)
                counts = None
            self._depth = (time.monotonic(), counts)
            return counts

    def stuck(self) -> list[str]:
        """``/healthz``: a line per loop that has not turned within `stall_bound`; [] if none."""
        from prometheus_client import multiprocess

        from threadmill_core.worker.metrics import LOOP_TURNED

        bound = stall_bound(self.settings.poll_interval)
        problems = []
        now, calling = time.monotonic(), self._calling
        waited = None if calling is None else now - calling
        problem = supervisor_stall(now - self._turned, waited, bound)
        if problem is not None:
            problems.append(problem)
        live = self._live()
        turned: dict[int, float] = {}
        collector = multiprocess.MultiProcessCollector(None, self._directory)  # type: ignore[no-untyped-call]  # prometheus_client's multiprocess module is untyped
        for family in collector.collect():  # type: ignore[no-untyped-call]
            if family.name == LOOP_TURNED:
                turned = {int(s.labels["pid"]): s.value for s in family.samples}
        wall, now = time.time(), time.monotonic()
        for pid in live:
            idle = wall - turned[pid] if pid in turned else now - self._seen.get(pid, now)
            if idle > bound:
                problems.append(f"worker process {pid}: its loop has not turned for {idle:.1f} s")
        return problems


class _SupervisorCollector:
    """What only the supervisor knows: live worker processes, and the queues' depth."""

    def __init__(self, live: int, depth: Callable[[], dict[str, QueueCounts] | None]) -> None:
        self._live = live
        self._depth = depth

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        yield GaugeMetricFamily(
            "threadmill_worker_processes", "Live worker processes.", value=self._live
        )
        counts = self._depth()
        if counts is None:
            return
        family = GaugeMetricFamily(
            "threadmill_queue_tasks", "Tasks in each segment of a queue, read from the backend.",
            labels=("queue", "status"),
        )  # fmt: skip
        for queue, count in sorted(counts.items()):
            for status in TaskResultStatus:
                family.add_metric((queue, status.value.lower()), count.of(status))
        yield family


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    monitor: Monitor


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:  # http.server's name
        monitor = self.server.monitor
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            from prometheus_client import CONTENT_TYPE_LATEST

            self._send(200, monitor.metrics(), CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            problems = monitor.stuck()
            self._text(503 if problems else 200, "\n".join(problems) or "ok")
        elif path == "/readyz":
            problem = monitor.unready()
            self._text(503 if problem else 200, problem or "ok")
        else:
            self._text(404, "not found: try /metrics, /healthz or /readyz")

    def _text(self, code: int, text: str) -> None:
        self._send(code, (text + "\n").encode(), "text/plain; charset=utf-8")

    def _send(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # http.server's name
        log.debug("metrics endpoint: " + format, *args)


def monitored(run: Callable[[Supervisor], int]) -> Callable[[Supervisor], int]:
    """Wrap `Supervisor.run` with its `Monitor`'s opening and closing (see the module doc)."""

    @functools.wraps(run)
    def wrapper(supervisor: Supervisor) -> int:
        from threadmill_core.worker.settings import EXIT_CONFIG_ERROR

        monitor = supervisor.monitor
        try:
            monitor.open(supervisor)
        except MetricsPortUnavailable as exc:
            log.error("cannot start: %s", exc)
            return EXIT_CONFIG_ERROR
        try:
            code = run(supervisor)
        finally:
            monitor.close()
        return EXIT_CONFIG_ERROR if monitor.failed else code

    return wrapper
