"""Dramatiq with its Redis broker: ``actor.send()``, the ``dramatiq`` CLI, prefetch 64."""

from __future__ import annotations

import time
from typing import ClassVar

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from benchmarks.peers import Peer, python_module
from benchmarks.peers import _common as common

PREFETCH = 64

broker = RedisBroker(url=common.redis_url())  # type: ignore[no-untyped-call]  # untyped upstream
dramatiq.set_broker(broker)


@dramatiq.actor(max_retries=0)
def incr() -> None:
    common.incr()


@dramatiq.actor(max_retries=0)
def started(sent: float) -> None:
    common.started(sent)


class DramatiqPeer(Peer):
    name: ClassVar[str] = "dramatiq"
    distribution: ClassVar[str] = "dramatiq"

    def teardown(self) -> None:
        broker.client.connection_pool.disconnect()

    def enqueue(self, n: int) -> float:
        send = incr.send
        begin = time.perf_counter()
        for _ in range(n):
            send()
        return time.perf_counter() - begin

    def send_probe(self) -> None:
        started.send(time.time())

    def worker_command(self, threads: int) -> list[str]:
        return python_module("dramatiq", __name__, "--processes", "1", "--threads", str(threads))

    def worker_env(self) -> dict[str, str]:
        return {"dramatiq_queue_prefetch": str(PREFETCH)}

    def describe(self, threads: int) -> str:
        return f"dramatiq --processes 1 --threads {threads}, prefetch {PREFETCH}"
