"""What runs inside a worker process of the supervisor (`threadmill_core.worker.supervisor`).

A worker process is one `Worker` with `WorkerSettings.threads` threads and
no maintenance of its own (the supervisor runs that). The supervisor starts
it at `forked_main` (forked from the supervisor, which has run the setup and
imported the task modules already) or at `spawned_main` (a fresh
interpreter, which runs `prepare_process` itself first). Either then
connects, waiting out an outage, and works until told to stop; with
`WorkerSettings.max_tasks`, it exits 0 after that many claims (plus up to
`max_tasks_jitter`) and the supervisor starts another. One that cannot
start exits with `EXIT_CONFIG_ERROR`. Its worker id is `worker_id_of` its pid
and the tag the supervisor gave it, so the supervisor knows it too.

Signals: SIGTERM and `STOP_NOW_SIGNAL` are blocked in every thread and
taken by a thread of its own (`_watch_signals`). A SIGTERM asks for a
graceful stop (the running tasks finish), however many arrive, so a SIGTERM
sent to the whole process group (as systemd does) is one graceful stop.
`STOP_NOW_SIGNAL` stops it at once (`Worker.stop_now`): it gives its
prefetch back in one call, sends the outcomes waiting for their batch, logs
each running task it abandons and what becomes of it, and exits with
`EXIT_ABANDONED` (0 if none was running). A process whose `Worker`
abandoned a task thread past its hard limit (`Worker.stuck_threads`)
exits with `EXIT_REPLACE` once its other tasks finished, and the
supervisor starts a fresh one. SIGINT is ignored: the supervisor
turns a Ctrl-C into a SIGTERM for each worker process.

Each adds the tasks it ran to an outcome to the supervisor's counter
(`Supervisor.ran`) as it exits, however it was stopped, unless
it was killed.

Inside a worker process the default broker (`threadmill_core.default_broker`,
used by a task that enqueues a follow-up without naming a broker) is the
worker's own: each entry point sets ``THREADMILL_URL`` to
`WorkerSettings.broker_url` first, for every thread of the process and the
processes it starts.

Both entry points are top-level functions: `multiprocessing` hands a
spawned process its target by reference, with its `WorkerSettings` pickled.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING

from threadmill_core import tracing
from threadmill_core.worker import Worker
from threadmill_core.worker.logs import configure_worker_logging, identify_worker
from threadmill_core.worker.outage import Outage
from threadmill_core.worker.settings import (
    EXIT_ABANDONED,
    EXIT_CONFIG_ERROR,
    EXIT_REPLACE,
    FORK_BLOCKED,
    STOP_NOW_SIGNAL,
    WorkerSettings,
    cannot_start,
    connect_when_reachable,
    prepare_process,
)

if TYPE_CHECKING:
    from multiprocessing.sharedctypes import Synchronized

    #: The supervisor's count of the tasks its worker processes ran: `multiprocessing.Value`.
    TaskCount = Synchronized[int]

# The supervisor's logger: how a worker process starts and stops is the supervisor's story.
log = logging.getLogger("threadmill.supervisor")

#: The signals a worker process takes in its signal thread (see `_watch_signals`).
_WORKER_SIGNALS = frozenset({signal.SIGTERM, STOP_NOW_SIGNAL})


def worker_id_of(pid: int, tag: str) -> str:
    """The worker id of the worker process `pid` that the supervisor started with `tag`.

    Laid out as `threadmill_core.worker.worker.default_worker_id` lays one out, with
    the supervisor's `tag` as its random part: the process names itself with
    it, and the supervisor, which knows the pid once the process started,
    knows the id without asking (to expire the process's leases when it dies).
    """
    return f"{socket.gethostname()}:{pid}:{tag}"


def forked_main(settings: WorkerSettings, index: int, ran: TaskCount, tag: str) -> None:
    """A worker process forked from the supervisor, which had loaded the tasks already."""
    # The supervisor's handlers came with the fork; its signals are still
    # blocked (see `threadmill_core.worker.supervisor.Supervisor._fork`), so none of
    # them has run here. SIGTERM and STOP_NOW_SIGNAL stay blocked: one that
    # came meanwhile waits for `_watch_signals`.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORK_BLOCKED - _WORKER_SIGNALS)
    _default_to(settings.broker_url)
    _serve(settings, index, ran, tag)


def spawned_main(settings: WorkerSettings, index: int, ran: TaskCount, tag: str) -> None:
    """A spawned worker process: load the tasks, then work until told to stop."""
    # Blocked before the setup and the task modules run: a thread they start (a tracer
    # provider's batch exporter, say) inherits the mask, so a SIGTERM cannot land there and
    # kill the process by its default action. One that comes meanwhile waits for
    # `_watch_signals`.
    signal.pthread_sigmask(signal.SIG_BLOCK, _WORKER_SIGNALS)
    configure_worker_logging(settings.log_level, settings.log_format)
    _default_to(settings.broker_url)  # before the task modules, which may enqueue on import
    try:
        prepare_process(settings)
    except Exception as exc:
        cannot_start(f"worker {index} cannot start", exc)
        sys.exit(EXIT_CONFIG_ERROR)
    _serve(settings, index, ran, tag)


def _default_to(url: str) -> None:
    """Make `url` this process's default broker, and its children's: follow-up tasks go there."""
    # This process is the worker's own, so its environment is ours to set.
    os.environ["THREADMILL_URL"] = url


def _serve(settings: WorkerSettings, index: int, ran: TaskCount, tag: str) -> None:
    """A worker process with its tasks loaded: connect, then work until told to stop."""
    # Blocked in this thread and so in every thread it starts; `_watch_signals` takes them.
    signal.pthread_sigmask(signal.SIG_BLOCK, _WORKER_SIGNALS)
    # Ctrl-C reaches the whole process group; the supervisor turns it into a
    # SIGTERM for us, so taking SIGINT too would count one Ctrl-C twice.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    worker_id = worker_id_of(os.getpid(), tag)
    identify_worker(index, worker_id)
    try:
        outage = Outage(logging.getLogger("threadmill.worker"), settings.reconnect_backoff)
        broker = connect_when_reachable(settings.broker_url, outage, time.sleep)
    except Exception as exc:
        cannot_start(f"worker {index} cannot start", exc)
        sys.exit(EXIT_CONFIG_ERROR)
    if broker is None:  # never: time.sleep does not ask to give up
        return
    worker = Worker(
        broker,
        queues=settings.queues,
        threads=settings.threads,
        prefetch=settings.prefetch,
        lease_ttl=settings.lease_ttl,
        time_limit=settings.time_limit,
        time_limit_grace=settings.time_limit_grace,
        poll_interval=settings.poll_interval,
        maintenance=False,
        worker_id=worker_id,
        reconnect_backoff=settings.reconnect_backoff,
    )

    _watch_signals(worker, ran)
    max_tasks = None
    if settings.max_tasks is not None:
        max_tasks = settings.max_tasks + random.randint(0, settings.max_tasks_jitter)
    count = worker.run(burst=settings.burst, max_tasks=max_tasks)
    broker.close()
    # A forked process ends in os._exit (multiprocessing's), as a replaced one does: no
    # atexit handler runs, so the tracer provider's batch is exported here or never.
    tracing.flush()
    _count(ran, count)
    if worker.stuck_threads:
        log.warning(
            "worker %s exits to be replaced: %d task thread(s) stuck past their hard limit; "
            "%d task(s) ran to an outcome", worker.worker_id, len(worker.stuck_threads), count,
        )  # fmt: skip
        logging.shutdown()
        os._exit(EXIT_REPLACE)  # the stuck threads cannot be joined; nothing else is left
    log.info("worker %s stopped: %d task(s) ran to an outcome", worker.worker_id, count)


def _count(ran: TaskCount, count: int) -> None:
    """Add `count` tasks to the supervisor's `ran`."""
    with ran.get_lock():
        ran.value += count


def _watch_signals(worker: Worker, ran: TaskCount) -> None:
    """Take SIGTERM (stop, finishing the running tasks) and `STOP_NOW_SIGNAL` (stop now).

    A thread of its own waits for them (`signal.sigwait`, the signals
    blocked in every other thread), rather than a handler: a handler runs in
    the main thread between two of its bytecodes, maybe while that thread
    holds a lock that `Worker.stop` takes, and a second signal would run a
    second handler inside the first. A signal that came before this (while
    the process connected) is taken now; `Worker.run` keeps a stop made
    before it.
    """

    def watch() -> None:
        while True:
            signum = signal.sigwait(_WORKER_SIGNALS)
            if signum == STOP_NOW_SIGNAL:
                abandoned = worker.stop_now()
                _count(ran, worker.processed)
                tracing.flush()  # the spans of the tasks that ended, before os._exit
                logging.shutdown()  # flush the lines that say what became of each task
                os._exit(EXIT_ABANDONED if abandoned else 0)
            if not worker.stopping:  # another SIGTERM is the same request
                log.info("worker %s stopping: finishing running tasks", worker.worker_id)
                worker.stop()

    threading.Thread(target=watch, name="threadmill-signals", daemon=True).start()
