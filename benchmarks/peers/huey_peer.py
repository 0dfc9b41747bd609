"""Huey with `RedisHuey` (blocking reads): ``task()``, ``huey_consumer -k thread``."""

from __future__ import annotations

import time
from typing import ClassVar

from huey import RedisHuey

from benchmarks.peers import Peer, python_module
from benchmarks.peers import _common as common

huey = RedisHuey("bench", url=common.redis_url())


@huey.task()  # type: ignore[untyped-decorator]  # untyped upstream
def incr() -> None:
    common.incr()


@huey.task()  # type: ignore[untyped-decorator]  # untyped upstream
def started(sent: float) -> None:
    common.started(sent)


class HueyPeer(Peer):
    name: ClassVar[str] = "huey"
    distribution: ClassVar[str] = "huey"

    def teardown(self) -> None:
        huey.storage.conn.connection_pool.disconnect()

    def enqueue(self, n: int) -> float:
        call = incr
        begin = time.perf_counter()
        for _ in range(n):
            call()
        return time.perf_counter() - begin

    def send_probe(self) -> None:
        started(time.time())

    def worker_command(self, threads: int) -> list[str]:
        return python_module(
            "huey.bin.huey_consumer", f"{__name__}.huey", "-k", "thread", "-w", str(threads)
        )

    def describe(self, threads: int) -> str:
        return f"huey_consumer -k thread -w {threads}"
