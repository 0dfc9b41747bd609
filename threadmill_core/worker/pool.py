"""The worker processes of ``threadmill worker``: started, forked or spawned, and stopped.

`WorkerProcesses` is the half of `threadmill_core.worker.supervisor.Supervisor`
that starts its worker processes (`threadmill_core.worker.process` is what
runs inside each) and signals them; the supervisor decides when.

Process setup: the supervisor prepares itself first thing, as a spawned
worker process does (`prepare_process`: `WorkerSettings.import_path`, then
`WorkerSettings.setup`, then the task modules; see
`threadmill_core.worker.settings`). A forked worker process inherits what
that did in the supervisor. The supervisor then logs what it runs (see
`threadmill_core.worker.startup`).

Starting worker processes: the first ones are forked from the supervisor
once it has run the setup, imported the task modules and reached the
backend (so the backend's modules are loaded too, and a bad URL fails
before any worker starts: one that has not answered within
`WorkerSettings.connect_timeout` ends the supervisor with one line and
`EXIT_CONFIG_ERROR`), so a worker starts without a second interpreter
start-up and import of everything; a restarted one (after a death, a
recycling, or a burst's second round) is spawned, a fresh interpreter that
runs the setup and imports the modules itself. The rule that makes the
fork safe: at that moment the supervisor has one thread, no open
connection and no lock held: it closes its connection to the backend
before the fork (and connects again right after), and has started no
thread. So a fork happens only where that holds as far as the supervisor
can tell: when it runs in the main thread and no other thread is alive (task
modules or a setup that started one), on a platform whose fork is safe for
Python (not macOS), and unless `WorkerSettings.fork` is false; else the
first processes are spawned too, and the log says why. What it cannot see
is a connection that the setup or a task module opened at import time:
every forked worker would share it. Open connections lazily (Django and
redis-py do) or set ``fork=False`` (``threadmill worker --spawn``). SIGTERM
and SIGINT are blocked across each fork, so a signal meant for the
supervisor never runs its handler in the child, nor the reverse; the child
sets its own before unblocking them.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import sys
import threading
import uuid
from multiprocessing.process import BaseProcess
from multiprocessing.sharedctypes import Synchronized

from threadmill_core.worker.process import forked_main, spawned_main, worker_id_of
from threadmill_core.worker.settings import FORK_BLOCKED, WorkerSettings

log = logging.getLogger("threadmill.supervisor")


def fork_refusal(settings: WorkerSettings) -> str | None:
    """Why the first worker processes cannot be forked from this process now; None if they can.

    Called after the setup and the imports, while the supervisor's connection
    is closed: the fork is safe when this process has one thread (see the
    module doc).
    """
    if not settings.fork:
        return "fork=False"
    if sys.platform == "darwin" or "fork" not in multiprocessing.get_all_start_methods():
        return f"fork is not safe on {sys.platform}"
    if threading.current_thread() is not threading.main_thread():
        return "the supervisor does not run in the main thread"
    others = [t.name for t in threading.enumerate() if t is not threading.current_thread()]
    if others:
        return f"threads are running ({', '.join(sorted(others))})"
    return None


class WorkerProcesses:
    """The supervisor's worker processes, by index. The attributes are the `Supervisor`'s."""

    settings: WorkerSettings
    _children: dict[int, BaseProcess]
    _worker_ids: dict[int, str]  # index -> the worker id of that child
    #: Tasks run to an outcome by the worker processes that exited so far.
    ran: Synchronized[int]

    def _start_first(self) -> None:
        """Start the first worker processes: forked where `fork_refusal` allows, else spawned."""
        refusal = fork_refusal(self.settings)
        if refusal is not None and self.settings.fork:
            log.info("worker processes are spawned, not forked (a slower start): %s", refusal)
        for index in range(self.settings.processes):
            if refusal is None:
                self._fork(index)
            else:
                self._start(index)

    def _fork(self, index: int) -> None:
        """Fork worker process `index` from this one; only where `fork_refusal` said None.

        SIGTERM and SIGINT stay blocked from just before the fork until the
        child has replaced the handlers it inherited
        (`threadmill_core.worker.process.forked_main`) and, here, until the
        fork returned: one arriving meanwhile waits, and then reaches the
        handler of the process it was sent to.
        """
        tag = uuid.uuid4().hex[:6]
        process = multiprocessing.get_context("fork").Process(
            target=forked_main,
            args=(self.settings, index, self.ran, tag),
            name=f"threadmill-worker-{index}",
            daemon=False,
        )
        signal.pthread_sigmask(signal.SIG_BLOCK, FORK_BLOCKED)
        try:
            process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, FORK_BLOCKED)
        self._started(index, process, tag)

    def _start(self, index: int) -> None:
        """Spawn worker process `index`: a fresh interpreter that prepares itself."""
        tag = uuid.uuid4().hex[:6]
        process = multiprocessing.get_context("spawn").Process(
            target=spawned_main,
            args=(self.settings, index, self.ran, tag),
            name=f"threadmill-worker-{index}",
            daemon=False,
        )
        process.start()
        self._started(index, process, tag)

    def _started(self, index: int, process: BaseProcess, tag: str) -> None:
        self._children[index] = process
        assert process.pid is not None  # started
        self._worker_ids[index] = worker_id_of(process.pid, tag)

    def _stop_children(self, sig: int) -> None:
        for process in self._children.values():
            if process.is_alive() and process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, sig)

    def pids(self) -> list[int]:
        """Process ids of the live worker processes; from any thread (``/healthz`` asks)."""
        return [p.pid for p in list(self._children.values()) if p.is_alive() and p.pid is not None]
