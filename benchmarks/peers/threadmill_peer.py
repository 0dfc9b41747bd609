"""threadmill: ``@task`` functions, `Broker.enqueue` / `enqueue_many`, ``threadmill worker``.

Two configurations of the same worker: ``threadmill`` with its defaults
(the adaptive prefetch, issue 38), and ``threadmill@prefetch64`` with
``--prefetch 64`` (Dramatiq's prefetch in this run), which the report
compares it with as it compares a baseline.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

from benchmarks.peers import Peer, python_module
from benchmarks.peers import _common as common
from threadmill_core import Broker, connect, task

NAMESPACE = "bench"
#: The tuned configuration's prefetch: Dramatiq's prefetch in this run is 64 too.
PREFETCH = 64
#: How long a `nap` runs (seconds): the hoarding measurement's long task.
NAP = 0.1


@task
def incr() -> None:
    common.incr()


@task
def started(sent: float) -> None:
    common.started(sent)


@task
def nap() -> None:
    """Sleep `NAP`, then count."""
    time.sleep(NAP)
    common.incr()


def broker_url(redis_url: str) -> str:
    return f"{redis_url}?namespace={NAMESPACE}"


class ThreadmillPeer(Peer):
    name: ClassVar[str] = "threadmill"
    distribution: ClassVar[str] = "threadmill"
    has_batch: ClassVar[bool] = True
    #: ``--prefetch``; None: the worker's default.
    prefetch: ClassVar[int | None] = None

    broker: Broker

    def setup(self) -> None:
        self.broker = connect(broker_url(self.redis_url))

    def teardown(self) -> None:
        self.broker.close()

    def enqueue(self, n: int) -> float:
        enqueue, broker = Broker.enqueue, self.broker
        begin = time.perf_counter()
        for _ in range(n):
            enqueue(broker, incr)
        return time.perf_counter() - begin

    def enqueue_batch(self, n: int) -> float:
        calls: list[tuple[tuple[()], dict[str, Any]]] = [((), {})] * n
        begin = time.perf_counter()
        self.broker.enqueue_many(incr, calls)
        return time.perf_counter() - begin

    def send_probe(self) -> None:
        self.broker.enqueue(started, time.time())

    def worker_command(self, threads: int) -> list[str]:
        return python_module(
            "threadmill_core.cli",
            "worker",
            __name__,
            "--broker",
            broker_url(self.redis_url),
            "--processes",
            "1",
            "--threads",
            str(threads),
            *self._prefetch_option(),
        )

    def describe(self, threads: int) -> str:
        return " ".join(
            ["threadmill worker --processes 1 --threads", str(threads), *self._prefetch_option()]
        )

    def _prefetch_option(self) -> list[str]:
        return [] if self.prefetch is None else ["--prefetch", str(self.prefetch)]


class ThreadmillPrefetch64Peer(ThreadmillPeer):
    """The same worker with ``--prefetch 64``."""

    name: ClassVar[str] = "threadmill@prefetch64"
    prefetch: ClassVar[int | None] = PREFETCH


def enqueue_naps(redis_url: str, n: int) -> None:
    """A backlog of `n` `nap` tasks (the hoarding measurement's; not timed)."""
    with connect(broker_url(redis_url)) as broker:
        broker.enqueue_many(nap, [((), {})] * n)
