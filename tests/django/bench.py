"""The in-process tests' bench: the default alias on a fake-clock broker, and signal recording."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import attrs
from django.tasks import signals
from django.test import override_settings

from threadmill_core import Broker, FakeClock, Worker
from threadmill_django.testing import use_broker
from threadmill_memory import MemoryBackend


@attrs.define
class Bench:
    """The default alias on a memory backend with a fake clock, and a way to run its tasks."""

    broker: Broker
    clock: FakeClock

    def work(self, *queues: str, threads: int = 1, prefetch: int | None = None) -> int:
        """Run what is ready in `queues` (default: default) and return how many ran."""
        worker = Worker(self.broker, queues=list(queues or ["default"]), threads=threads,
                        prefetch=prefetch)  # fmt: skip
        return worker.run(burst=True)


def bench() -> Iterator[Bench]:
    clock = FakeClock()
    with use_broker("default", Broker(MemoryBackend(clock=clock))) as broker:
        yield Bench(broker=broker, clock=clock)
    broker.close()


#: Two aliases on two brokers (URLs a worker's settings accept; `two_aliases` puts memory
#: brokers in their place, and nothing connects to these).
TWO_ALIASES = {
    "default": {
        "BACKEND": "threadmill_django.TaskBackend",
        "QUEUES": ["default", "high", "low"],
        "OPTIONS": {"url": "redis://127.0.0.1:1/0?namespace=default"},
    },
    "emails": {
        "BACKEND": "threadmill_django.TaskBackend",
        "OPTIONS": {"url": "redis://127.0.0.1:1/0?namespace=emails"},
    },
}


@contextlib.contextmanager
def two_aliases(bench: Bench) -> Iterator[Broker]:
    """TASKS with a second alias, ``emails``, beside the bench's default, on a memory broker
    of its own on the bench's clock (returned)."""
    with (
        override_settings(TASKS=TWO_ALIASES),
        use_broker("emails", Broker(MemoryBackend(clock=bench.clock))) as broker,
    ):
        yield broker
    broker.close()


@attrs.define
class Signals:
    """Every task signal Django sent while connected: (name, id, status, sender) tuples."""

    seen: list[tuple[str, str, str, type[Any]]] = attrs.Factory(list)

    def of(self, name: str) -> list[tuple[str, str, str, type[Any]]]:
        return [event for event in self.seen if event[0] == name]


def recorded_signals() -> Iterator[Signals]:
    record = Signals()
    receivers = {}
    for name in ("task_enqueued", "task_started", "task_finished"):

        def receive(sender: type[Any], task_result: Any, _name: str = name, **_: Any) -> None:
            record.seen.append((_name, task_result.id, str(task_result.status), sender))

        receivers[name] = receive
        getattr(signals, name).connect(receive)
    yield record
    for name, receive in receivers.items():
        getattr(signals, name).disconnect(receive)
