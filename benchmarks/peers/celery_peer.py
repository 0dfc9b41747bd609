"""Celery with the Redis transport: ``task.delay()``, ``celery worker -P solo`` (or threads)."""

from __future__ import annotations

import time
from typing import Any, ClassVar

from celery import Celery

from benchmarks.peers import Peer, python_module
from benchmarks.peers import _common as common


def make_app() -> Celery:
    made = Celery("bench", broker=common.redis_url(), set_as_current=False)
    made.conf.update(
        task_ignore_result=True,
        broker_connection_retry_on_startup=True,
    )
    return made


#: The app the worker loads (``-A benchmarks.peers.celery_peer:app``).
app = make_app()


@app.task(name="bench.incr")  # type: ignore[untyped-decorator]  # untyped upstream
def incr() -> None:
    common.incr()


@app.task(name="bench.started")  # type: ignore[untyped-decorator]  # untyped upstream
def started(sent: float) -> None:
    common.started(sent)


class CeleryPeer(Peer):
    name: ClassVar[str] = "celery"
    distribution: ClassVar[str] = "celery"

    producer: Celery
    incr: Any
    started: Any

    def setup(self) -> None:
        # A fresh app per measurement: kombu remembers which queues it has
        # declared, and the harness flushes the server between measurements.
        self.producer = make_app()
        self.incr = self.producer.signature("bench.incr")
        self.started = self.producer.signature("bench.started")

    def teardown(self) -> None:
        self.producer.close()

    def enqueue(self, n: int) -> float:
        delay = self.incr.delay
        begin = time.perf_counter()
        for _ in range(n):
            delay()
        return time.perf_counter() - begin

    def send_probe(self) -> None:
        self.started.delay(time.time())

    def worker_command(self, threads: int) -> list[str]:
        pool = ["-P", "solo"] if threads == 1 else ["-P", "threads", "-c", str(threads)]
        return python_module("celery", "-A", f"{__name__}:app", "worker", *pool)

    def describe(self, threads: int) -> str:
        if threads == 1:
            return "celery worker -P solo"
        return f"celery worker -P threads -c {threads}"
