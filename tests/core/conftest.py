"""Fixtures for the core tests: a broker over a fresh memory backend on a fake clock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.core import tasks
from threadmill_core import Broker, FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def broker(clock: FakeClock) -> Iterator[Broker]:
    from threadmill_memory import MemoryBackend

    with Broker(MemoryBackend(clock=clock), url="memory://") as made:
        yield made


@pytest.fixture(autouse=True)
def _fresh_task_state() -> Iterator[None]:
    with tasks.calls_lock:
        tasks.calls.clear()
    tasks.release.clear()
    tasks.started.clear()
    yield
    tasks.release.set()
