"""The systems under test: threadmill and its peers, each behind one small interface.

A `Peer` module defines its two tasks (see `benchmarks.peers._common`) at
import time, reading the server's URL from ``BENCH_REDIS_URL``, so the same
module is what its worker process loads and what the harness enqueues with.
The harness only ever imports a peer module after it has started its
redis-server and set that variable.

The harness drives a peer like this, once per measurement::

    peer.setup()                  # producer connections
    peer.enqueue(n) / peer.enqueue_batch(n) / peer.send_probe()
    peer.worker_command(threads)  # run as a subprocess until the harness stops it
    peer.teardown()

Workers run the way each project's docs say: its own CLI, in its own
process group, with its default logging.
"""

from __future__ import annotations

import abc
import importlib
import importlib.metadata
import sys
from pathlib import Path
from typing import ClassVar

from benchmarks.server import REPO_ROOT

#: Every system the harness knows, in table order: name -> module:class.
REGISTRY: dict[str, str] = {
    "threadmill": "benchmarks.peers.threadmill_peer:ThreadmillPeer",
    "threadmill@prefetch64": "benchmarks.peers.threadmill_peer:ThreadmillPrefetch64Peer",
    "threadmill@time-limit": "benchmarks.peers.threadmill_peer:ThreadmillTimeLimitPeer",
    "dramatiq": "benchmarks.peers.dramatiq_peer:DramatiqPeer",
    "huey": "benchmarks.peers.huey_peer:HueyPeer",
    "saq": "benchmarks.peers.saq_peer:SaqPeer",
    "celery": "benchmarks.peers.celery_peer:CeleryPeer",
    "arq": "benchmarks.peers.arq_peer:ArqPeer",
    "rq": "benchmarks.peers.rq_peer:RqPeer",
}


class Unsupported(Exception):
    """This peer has no such mode (e.g. threads in RQ); the reason is the message."""


class Peer(abc.ABC):
    """One system under test. Subclasses set the class variables and the abstract methods."""

    #: Short name, a key of `REGISTRY`.
    name: ClassVar[str]
    #: The distribution whose version the report shows.
    distribution: ClassVar[str]
    #: Whether `enqueue_batch` is a real batch API (one or few round trips).
    has_batch: ClassVar[bool] = False

    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url

    @property
    def version(self) -> str:
        return importlib.metadata.version(self.distribution)

    def setup(self) -> None:  # noqa: B027 (optional: a peer may need no producer setup)
        """Open the producer side (connections, apps). Not timed."""

    def teardown(self) -> None:  # noqa: B027 (optional, like setup)
        """Close what `setup` opened."""

    @abc.abstractmethod
    def enqueue(self, n: int) -> float:
        """Enqueue `n` ``incr`` tasks one call at a time; the seconds the loop took."""

    def enqueue_batch(self, n: int) -> float:
        """Enqueue `n` ``incr`` tasks with the peer's batch API; the seconds it took."""
        raise Unsupported(f"{self.name} has no batch enqueue")

    def fill(self, n: int) -> None:
        """Put a backlog of `n` ``incr`` tasks in place as fast as the peer allows (not timed)."""
        if self.has_batch:
            for start in range(0, n, 10_000):
                self.enqueue_batch(min(10_000, n - start))
        else:
            self.enqueue(n)

    @abc.abstractmethod
    def send_probe(self) -> None:
        """Enqueue one ``started(time.time())``, the time read just before the enqueue call."""

    @abc.abstractmethod
    def worker_command(self, threads: int) -> list[str]:
        """The command that runs one worker process with `threads` task threads.

        Raises `Unsupported` when the peer cannot run that many threads in
        one process.
        """

    def worker_env(self) -> dict[str, str]:
        """Extra environment for the worker process."""
        return {}

    def worker_cwd(self) -> Path:
        """The directory the worker runs in: this repository, where the benchmark's tasks are."""
        return REPO_ROOT

    @abc.abstractmethod
    def describe(self, threads: int) -> str:
        """The configuration `worker_command(threads)` runs, for the report."""


def python_module(module: str, *args: str) -> list[str]:
    """``python -m module args...`` with this interpreter (the benchmark venv's)."""
    return [sys.executable, "-m", module, *args]


def load(name: str, redis_url: str) -> Peer:
    """Import and build peer `name`; ImportError (not installed) propagates to the caller."""
    module_name, class_name = REGISTRY[name].split(":")
    module = importlib.import_module(module_name)
    peer: Peer = getattr(module, class_name)(redis_url)
    return peer
