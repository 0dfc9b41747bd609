"""What the supervisor and its worker processes share: settings, process start, exit codes, signals.

`WorkerSettings` is everything a worker process needs; it is picklable,
since a spawned worker process receives it from the supervisor.

Process setup: `WorkerSettings.import_path` goes first on `sys.path`
(``threadmill worker`` gives the directory it runs in), then
`WorkerSettings.setup`, if given, is called, both first thing in the
supervisor and in every spawned worker process, before the task modules are
imported (`prepare_process`): setup is how a framework integration prepares
a process for its tasks (threadmill_django calls ``django.setup()`` there).
A forked worker process inherits what they did in the supervisor. See
docs/integrations.md. The supervisor then waits for the backend's first
answer (`reach_at_start`), at most `WorkerSettings.connect_timeout`: a
backend that never answered is most likely a wrong URL, and the worker
exits with `EXIT_CONFIG_ERROR` instead of waiting for it forever. From
then on an outage is ridden out: each worker process connects with
`connect_when_reachable`, which waits out an outage instead of failing.

How the two talk: the supervisor sends a worker process SIGTERM to stop it
(finishing its running tasks) and `STOP_NOW_SIGNAL` to stop it at once,
and blocks `FORK_BLOCKED` across a fork; a worker process exits with
`EXIT_CONFIG_ERROR` when it cannot start (the supervisor stops instead of
restarting it), with `EXIT_ABANDONED` when it abandoned running tasks, and
with `EXIT_REPLACE` when a task it ran did not stop at its hard limit (the
supervisor starts a fresh process).

The supervisor's side is `threadmill_core.worker.supervisor`, the worker
process's `threadmill_core.worker.process`; this module imports neither.
"""

from __future__ import annotations

import logging
import pickle
import signal
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

import attrs

from threadmill_core.broker import Broker, connect
from threadmill_core.errors import BackendUnavailable, InvalidOption, ThreadmillError
from threadmill_core.retry import ExponentialBackoff
from threadmill_core.urls import redact
from threadmill_core.worker.interrupts import HARD_LIMIT_GRACE
from threadmill_core.worker.logs import check_log_format
from threadmill_core.worker.outage import RECONNECT_BACKOFF, Outage
from threadmill_core.worker.startup import (
    TaskModuleError,
    check_module_name,
    import_task_modules,
    put_on_import_path,
)

if TYPE_CHECKING:
    from threadmill_core.periodic import Schedule

# The supervisor's logger, in its worker processes too: a process that cannot start says so there.
log = logging.getLogger("threadmill.supervisor")

#: A child exits with this when it cannot import its modules or reach its
#: broker: restarting it would only fail again, so the supervisor stops. The
#: supervisor exits with it too, and when its backend never answered at start.
EXIT_CONFIG_ERROR = 3
#: How long a worker waits at start for a backend that has never answered
#: (`WorkerSettings.connect_timeout`, ``--connect-timeout``): long enough for
#: a server started beside the worker (a container, a service restarted with
#: it) to come up, its backoff trying some eight times, and short enough that
#: a wrong host or port is said within half a minute.
CONNECT_TIMEOUT = timedelta(seconds=20)  # ``--connect-timeout``'s default too
#: A worker process stopped by force (a second signal, the shutdown timeout)
#: abandoned running tasks, or had to be killed; the supervisor exits with it too.
EXIT_ABANDONED = 4
#: A worker process abandoned a task thread past its hard limit (see
#: `threadmill_core.worker.interrupts`): it took no new tasks, gave its prefetch
#: back, let its other tasks finish and exited with this, so that the supervisor
#: starts a fresh process in its place.
EXIT_REPLACE = 5

#: What the supervisor sends a worker process to stop it at once (a second signal, or
#: the shutdown timeout): it gives its prefetch back and abandons its running tasks
#: (`Worker.stop_now`). A SIGTERM asks for a graceful stop, however many arrive: a
#: SIGTERM to the whole process group (systemd's default) reaches each worker
#: process twice, directly and from the supervisor, and is one request.
STOP_NOW_SIGNAL = signal.SIGUSR1

#: The signals blocked across a fork (see `threadmill_core.worker.supervisor.Supervisor._fork`).
FORK_BLOCKED = frozenset({signal.SIGTERM, signal.SIGINT, STOP_NOW_SIGNAL})


@attrs.frozen(kw_only=True)
class WorkerSettings:
    """Everything a worker process needs; picklable, since children are spawned."""

    #: Shown with its password hidden (`threadmill_core.urls.redact`) in the ``repr``.
    broker_url: str = attrs.field(repr=redact)
    modules: tuple[str, ...]
    queues: tuple[str, ...] = ("default",)
    processes: int = 1
    threads: int = 4
    #: Tasks claimed ahead of the free threads (see `Worker`); None: as many as `threads`.
    prefetch: int | None = None
    lease_ttl: timedelta = timedelta(seconds=30)
    #: The longest one attempt may run when its task or call sets no limit (see
    #: `Worker`); None: no limit.
    time_limit: timedelta | None = None
    #: How long a task told to stop may take before its process is replaced.
    time_limit_grace: timedelta = HARD_LIMIT_GRACE
    poll_interval: timedelta = timedelta(seconds=1)
    max_tasks: int | None = None
    max_tasks_jitter: int = 0
    burst: bool = False
    shutdown_timeout: timedelta = timedelta(seconds=30)
    log_level: str = "INFO"
    #: ``text`` or ``json`` (see `threadmill_core.worker.logs`).
    log_format: str = "text"
    #: Spaces out attempts to reach an unavailable backend (see `Worker`).
    reconnect_backoff: ExponentialBackoff = RECONNECT_BACKOFF
    #: How long the supervisor waits at start for the backend's first answer before
    #: exiting with `EXIT_CONFIG_ERROR` (see `reach_at_start`); None waits for ever.
    connect_timeout: timedelta | None = CONNECT_TIMEOUT
    #: Called with no arguments first thing in the supervisor and in each spawned worker
    #: process (a restarted one), before `modules` are imported; see `prepare_process`.
    setup: Callable[[], object] | None = None
    #: Directories put first on `sys.path` in the supervisor and in each worker
    #: process, before anything is imported (``threadmill worker``: the current one).
    import_path: tuple[str, ...] = ()
    #: Fork the first worker processes from the supervisor (the fast start), where
    #: that is safe; False spawns every one (see `threadmill_core.worker.supervisor`).
    fork: bool = True
    #: Serve ``/metrics``, ``/healthz`` and ``/readyz`` on this port (see
    #: `threadmill_core.worker.monitor`); None serves nothing and loads no metrics code.
    metrics_port: int | None = None
    #: The address the endpoints bind: this host only, unless told otherwise.
    metrics_host: str = "127.0.0.1"
    #: Trace each attempt in an OpenTelemetry span (`threadmill_core.tracing`), in
    #: every process of the command; False loads nothing of OpenTelemetry.
    tracing: bool = False
    #: Run a scheduler of the modules' `@periodic` schedules in the supervisor
    #: (see `threadmill_core.worker.scheduling`), unless `burst`; False: ``--no-schedules``.
    schedules: bool = True
    #: Which schedules that scheduler keeps: called with no arguments in the supervisor,
    #: once `modules` are imported, it returns them by name. None: every schedule
    #: declared in the process (`threadmill_core.periodic.registered_schedules`). An
    #: integration with several brokers in one process keeps each one's own here
    #: (threadmill_django: an alias's). Picklable, as `setup` is.
    kept_schedules: Callable[[], Mapping[str, Schedule]] | None = None

    def __attrs_post_init__(self) -> None:
        for module in self.modules:
            check_module_name(module)
        if self.broker_url.split("://", 1)[0] == "memory":
            raise InvalidOption(
                "memory:// lives inside one process, so worker processes cannot share it; "
                "use a shared backend (redis://...), or run threadmill_core.Worker in-process"
            )
        for name, value in (("processes", self.processes), ("threads", self.threads)):
            if value < 1:
                raise InvalidOption(f"{name} must be 1 or more, got {value}")
        if self.prefetch is not None and self.prefetch < 0:
            raise InvalidOption(f"prefetch must be 0 or more, got {self.prefetch}")
        if self.max_tasks is not None and self.max_tasks < 1:
            raise InvalidOption(f"max_tasks must be 1 or more, got {self.max_tasks}")
        if self.time_limit is not None and self.time_limit <= timedelta(0):
            raise InvalidOption(f"time_limit must be positive, got {self.time_limit}")
        if self.time_limit_grace <= timedelta(0):
            raise InvalidOption(f"time_limit_grace must be positive, got {self.time_limit_grace}")
        if self.connect_timeout is not None and self.connect_timeout <= timedelta(0):
            raise InvalidOption(f"connect_timeout must be positive, got {self.connect_timeout}")
        if self.max_tasks_jitter < 0:
            raise InvalidOption(f"max_tasks_jitter must be 0 or more, got {self.max_tasks_jitter}")
        check_log_format(self.log_format)
        if self.setup is not None:
            _check_callable("setup", self.setup)
        if self.kept_schedules is not None:
            _check_callable("kept_schedules", self.kept_schedules)


def _check_callable(name: str, value: object) -> None:
    """Refuse a `name` that is not callable, or that a spawned process could not receive."""
    if not callable(value):
        raise InvalidOption(f"{name} must be a callable taking no arguments, got {value!r}")
    try:
        pickle.dumps(value)
    except Exception as exc:
        raise InvalidOption(
            f"{name} {value!r} cannot be sent to a spawned worker process ({exc}); use a "
            "module-level function, or functools.partial of one with picklable arguments"
        ) from exc


def prepare_process(settings: WorkerSettings) -> dict[str, list[str]]:
    """Put `settings.import_path` on `sys.path`, run `settings.setup`, then import
    `settings.modules`: how every process starts. Returns the paths of the
    tasks each module defines (see `threadmill_core.worker.startup.import_task_modules`).

    The supervisor and each worker process call this before anything else,
    so a setup that configures a framework (and may register tasks) runs
    before the modules whose imports need it. An exception from either is a
    configuration error: the process does not start. A module that does
    not import raises `threadmill_core.worker.startup.TaskModuleError`.
    """
    if settings.metrics_port is not None:  # first: the app's own metrics must reach the files
        from threadmill_core.worker.metrics import install

        install()
    if settings.tracing:
        from threadmill_core import tracing

        tracing.enable()
    put_on_import_path(settings.import_path)
    if settings.setup is not None:
        settings.setup()
    return import_task_modules(settings.modules)


def cannot_start(what: str, exc: Exception) -> None:
    """Log why a process cannot start in one line; the traceback too at DEBUG."""
    plain = isinstance(exc, (TaskModuleError, BackendNeverReached))  # one line that says it all
    reason = str(exc) if plain else f"{type(exc).__name__}: {exc}"
    log.error("%s: %s", what, reason, exc_info=log.isEnabledFor(logging.DEBUG))


def connect_when_reachable(
    url: str, outage: Outage, pause: Callable[[float], object]
) -> Broker | None:
    """`connect(url)`, tried again after `pause(backoff)` while the backend is unavailable.

    Backends that reach their server when built (a cluster client learns
    the topology) raise `BackendUnavailable` during an outage; that is no
    reason for a worker to exit. `pause` returns true to give up (a stop
    was requested), and then the answer is None. Other errors propagate.
    """
    failures = 0
    while True:
        started = time.monotonic()
        try:
            broker = connect(url)
        except BackendUnavailable as exc:
            failures += 1
            if pause(outage.failed(exc, failures, started)):
                return None
            continue
        outage.reached(started)
        return broker


class BackendNeverReached(ThreadmillError):
    """The backend did not answer once within `timeout` of a worker's start; see `reach_at_start`.

    Its message is one line naming the backend (credentials hidden), the
    timeout and the last error, which is also the `__cause__`.
    """

    def __init__(self, url: str, timeout: timedelta, last: BackendUnavailable) -> None:
        from threadmill_core.urls import redact

        self.url = url
        self.timeout = timeout
        super().__init__(
            f"backend {redact(url)} did not answer within {timeout.total_seconds():g} s of "
            f"starting ({type(last).__name__}: {last}); check the URL, or start the backend "
            "first (--connect-timeout sets the wait)"
        )


def reach_at_start(
    url: str, outage: Outage, pause: Callable[[float], object], timeout: timedelta | None
) -> Broker | None:
    """`connect(url)` and the backend's first answer (its clock), within `timeout` of the call.

    A backend that has never answered is most likely a wrong URL, not an
    outage: while it does not answer, connecting and asking are tried again
    after `pause(backoff)` (the outage is reported as `connect_when_reachable`
    reports one), and once `timeout` has passed without an answer,
    `BackendNeverReached` is raised (the last attempt may overrun it by the
    backend's own connect timeout). None waits for ever. `pause` returns
    true to give up (a stop was requested), and then the answer is None.
    Other errors propagate; a broker that is not returned is closed.
    """
    deadline = None if timeout is None else time.monotonic() + timeout.total_seconds()
    broker: Broker | None = None
    failures = 0
    try:
        while True:
            started = time.monotonic()
            try:
                if broker is None:
                    broker = connect(url)
                broker.backend.now()  # a round trip every backend answers, changing nothing
            except BackendUnavailable as exc:
                failures += 1
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0 and timeout is not None:
                    raise BackendNeverReached(url, timeout, exc) from exc
                delay = outage.failed(exc, failures, started)  # its warning, once
                if pause(delay if left is None else min(delay, left)):
                    return None
                continue
            outage.reached(started)
            reached, broker = broker, None  # returned, so not closed below
            return reached
    finally:
        if broker is not None:
            broker.close()
