"""SAQ with its Redis queue: ``await queue.enqueue()``, ``saq`` CLI, concurrency 10."""

from __future__ import annotations

import asyncio
import time
from typing import Any, ClassVar

from saq import Queue

from benchmarks.peers import Peer, python_module
from benchmarks.peers import _common as common

CONCURRENCY = 10


async def incr(ctx: dict[str, Any]) -> None:
    await ctx["job"].queue.redis.incr(common.COUNT_KEY)


async def started(ctx: dict[str, Any], *, sent: float) -> None:
    latency = time.time() - sent
    await ctx["job"].queue.redis.rpush(common.STARTED_KEY, repr(latency))


#: What the worker loads (``saq benchmarks.peers.saq_peer.settings``).
settings = {
    "queue": Queue.from_url(common.redis_url()),
    "functions": [incr, started],
    "concurrency": CONCURRENCY,
}


class SaqPeer(Peer):
    name: ClassVar[str] = "saq"
    distribution: ClassVar[str] = "saq"

    loop: asyncio.AbstractEventLoop
    queue: Queue

    def setup(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.queue = Queue.from_url(self.redis_url)
        self.loop.run_until_complete(self.queue.connect())

    def teardown(self) -> None:
        self.loop.run_until_complete(self.queue.disconnect())
        self.loop.close()

    def enqueue(self, n: int) -> float:
        async def run() -> float:
            enqueue = self.queue.enqueue
            begin = time.perf_counter()
            for _ in range(n):
                await enqueue("incr")
            return time.perf_counter() - begin

        return self.loop.run_until_complete(run())

    def send_probe(self) -> None:
        self.loop.run_until_complete(self.queue.enqueue("started", sent=time.time()))

    def worker_command(self, threads: int) -> list[str]:
        return python_module("saq", f"{__name__}.settings")

    def describe(self, threads: int) -> str:
        return f"saq, concurrency {CONCURRENCY} (asyncio: one thread whatever the threads)"
