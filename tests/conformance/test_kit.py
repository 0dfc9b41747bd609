"""The kit itself: it must not raise false alarms on a backend whose clock it does not control."""

from datetime import datetime, timedelta

import pytest
from hypothesis import settings

from tests.conftest import RESULT_TTL
from threadmill_core.clock import FakeClock
from threadmill_core.testing import Harness, run_machine


class CreepingClock(FakeClock):
    """A fake clock that also moves a millisecond at every reading, as a server's clock does."""

    def now(self) -> datetime:
        self.advance(timedelta(milliseconds=1))
        return super().now()


def creeping_memory_harness() -> Harness:
    from threadmill_memory import MemoryBackend

    clock = CreepingClock()
    backend = MemoryBackend(clock=clock, result_ttl=RESULT_TTL)
    return Harness(
        backend=backend,
        advance=clock.advance,
        exact_clock=False,
        close=backend.close,
        result_ttl=RESULT_TTL,
    )


@pytest.mark.memory
def test_machine_tolerates_a_clock_that_creeps() -> None:
    """On a backend with exact_clock False, real time passing between calls is not a violation."""
    # A quarter of the profile's examples: this guards the kit, not a backend.
    run_machine(creeping_memory_harness, settings(max_examples=settings().max_examples // 4))
