"""Fixtures for the memory backend's own tests: a backend on a fake clock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.memory.helpers import RESULT_TTL
from threadmill_core.clock import FakeClock
from threadmill_memory import MemoryBackend


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def backend(clock: FakeClock) -> Iterator[MemoryBackend]:
    built = MemoryBackend(clock=clock, result_ttl=RESULT_TTL)
    try:
        yield built
    finally:
        built.close()
