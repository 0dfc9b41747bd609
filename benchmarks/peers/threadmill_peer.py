"""threadmill: ``@task`` functions, `Broker.enqueue` / `enqueue_many`, ``threadmill worker``.

Three configurations of the same worker: ``threadmill`` with its defaults
(the adaptive prefetch, issue 38), ``threadmill@prefetch64`` with
``--prefetch 64`` (Dramatiq's prefetch in this run), which the report
compares it with as it compares a baseline, and ``threadmill@time-limit``,
the defaults with a time limit on every task (``--time-limit``, issue 35).
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
    #: ``--time-limit`` (seconds); None: none, the worker's default.
    time_limit: ClassVar[int | None] = None

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
            *self._options(),
        )

    def describe(self, threads: int) -> str:
        return " ".join(
            ["threadmill worker --processes 1 --threads", str(threads), *self._options()]
        )

    def _options(self) -> list[str]:
        options = [] if self.prefetch is None else ["--prefetch", str(self.prefetch)]
        if self.time_limit is not None:
            options += ["--time-limit", str(self.time_limit)]
        return options


class ThreadmillPrefetch64Peer(ThreadmillPeer):
    """The same worker with ``--prefetch 64``."""

    name: ClassVar[str] = "threadmill@prefetch64"
    prefetch: ClassVar[int | None] = PREFETCH


class ThreadmillTimeLimitPeer(ThreadmillPeer):
    """The defaults with ``--time-limit 60``: every task runs under a limit it never reaches."""

    name: ClassVar[str] = "threadmill@time-limit"
    time_limit: ClassVar[int | None] = 60


def enqueue_naps(redis_url: str, n: int) -> None:
    """A backlog of `n` `nap` tasks (the hoarding measurement's; not timed)."""
    with connect(broker_url(redis_url)) as broker:
        broker.enqueue_many(nap, [((), {})] * n)
