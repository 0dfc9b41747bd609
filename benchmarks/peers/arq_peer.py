"""arq: ``await pool.enqueue_job()``, the ``arq`` CLI, poll_delay 0."""

from __future__ import annotations

import asyncio
import time
from typing import Any, ClassVar

from arq import create_pool
from arq.connections import ArqRedis, RedisSettings

from benchmarks.peers import Peer, python_module
from benchmarks.peers import _common as common


async def incr(ctx: dict[str, Any]) -> None:
    await ctx["redis"].incr(common.COUNT_KEY)


async def started(ctx: dict[str, Any], sent: float) -> None:
    latency = time.time() - sent
    await ctx["redis"].rpush(common.STARTED_KEY, repr(latency))


class WorkerSettings:
    """What the worker loads (``arq benchmarks.peers.arq_peer.WorkerSettings``)."""

    functions: ClassVar[list[Any]] = [incr, started]
    redis_settings = RedisSettings.from_dsn(common.redis_url())
    poll_delay = 0


class ArqPeer(Peer):
    name: ClassVar[str] = "arq"
    distribution: ClassVar[str] = "arq"

    loop: asyncio.AbstractEventLoop
    pool: ArqRedis

    def setup(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.pool = self.loop.run_until_complete(
            create_pool(RedisSettings.from_dsn(self.redis_url))
        )

    def teardown(self) -> None:
        self.loop.run_until_complete(self.pool.aclose())
        self.loop.close()

    def enqueue(self, n: int) -> float:
        async def run() -> float:
            enqueue = self.pool.enqueue_job
            begin = time.perf_counter()
            for _ in range(n):
                await enqueue("incr")
            return time.perf_counter() - begin

        return self.loop.run_until_complete(run())

    def send_probe(self) -> None:
        self.loop.run_until_complete(self.pool.enqueue_job("started", time.time()))

    def worker_command(self, threads: int) -> list[str]:
        return python_module("arq", f"{__name__}.WorkerSettings")

    def describe(self, threads: int) -> str:
        return "arq, max_jobs 10, poll_delay 0 (asyncio: one thread whatever the threads)"
