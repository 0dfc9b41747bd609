"""threadmill: ``@task`` functions, `Broker.enqueue` / `enqueue_many`, ``threadmill worker``."""

from __future__ import annotations

import time
from typing import Any, ClassVar

from benchmarks.peers import Peer, python_module
from benchmarks.peers import _common as common
from threadmill_core import Broker, connect, task

NAMESPACE = "bench"
#: Tasks claimed ahead of the free threads: Dramatiq's prefetch in this run is 64 too.
PREFETCH = 64


@task
def incr() -> None:
    common.incr()


@task
def started(sent: float) -> None:
    common.started(sent)


def broker_url(redis_url: str) -> str:
    return f"{redis_url}?namespace={NAMESPACE}"


class ThreadmillPeer(Peer):
    name: ClassVar[str] = "threadmill"
    distribution: ClassVar[str] = "threadmill"
    has_batch: ClassVar[bool] = True

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
            "--prefetch",
            str(PREFETCH),
        )

    def describe(self, threads: int) -> str:
        return f"threadmill worker --processes 1 --threads {threads} --prefetch {PREFETCH}"
