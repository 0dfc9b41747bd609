"""RQ: ``Queue.enqueue`` / ``enqueue_many``, ``rq worker -w SimpleWorker``."""

from __future__ import annotations

import time
from typing import ClassVar

from redis import Redis
from rq import Queue

from benchmarks.peers import Peer, Unsupported, python_module
from benchmarks.peers import _common as common


def incr() -> None:
    common.incr()


def started(sent: float) -> None:
    common.started(sent)


class RqPeer(Peer):
    name: ClassVar[str] = "rq"
    distribution: ClassVar[str] = "rq"
    has_batch: ClassVar[bool] = True

    connection: Redis
    queue: Queue

    def setup(self) -> None:
        self.connection = Redis.from_url(self.redis_url)
        self.queue = Queue(connection=self.connection)

    def teardown(self) -> None:
        self.connection.close()

    def enqueue(self, n: int) -> float:
        enqueue = self.queue.enqueue
        begin = time.perf_counter()
        for _ in range(n):
            enqueue(incr)
        return time.perf_counter() - begin

    def enqueue_batch(self, n: int) -> float:
        begin = time.perf_counter()
        self.queue.enqueue_many([Queue.prepare_data(incr) for _ in range(n)])
        return time.perf_counter() - begin

    def send_probe(self) -> None:
        self.queue.enqueue(started, time.time())

    def worker_command(self, threads: int) -> list[str]:
        if threads != 1:
            raise Unsupported("RQ runs one job at a time per worker process (no threads)")
        return python_module(
            "rq.cli", "worker", "-w", "rq.worker.SimpleWorker", "--url", self.redis_url
        )

    def describe(self, threads: int) -> str:
        return "rq worker -w rq.worker.SimpleWorker"
