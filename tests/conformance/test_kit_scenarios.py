"""The kit's named scenarios catch the bugs they are written for.

Each broken backend below is the memory backend with one plausible bug put
back in; the scenario written for that bug must fail on it, naming its rule,
while the unbroken backend passes it (test_conformance.py runs every
scenario on every bundled backend).
"""

from collections.abc import Callable, Sequence
from datetime import timedelta

import pytest

from tests.conftest import RESULT_TTL
from threadmill_core.clock import FakeClock
from threadmill_core.models import Lease, TaskResult
from threadmill_core.testing import Harness, ProtocolViolation
from threadmill_core.testing.scenarios import SCENARIOS
from threadmill_memory import MemoryBackend
from threadmill_memory.testing import corruptions

pytestmark = pytest.mark.memory


def harness_of(backend_class: Callable[..., MemoryBackend]) -> Harness:
    """A harness like the registry's memory one, on `backend_class`."""
    clock = FakeClock()
    backend = backend_class(clock=clock, result_ttl=RESULT_TTL)
    return Harness(
        backend=backend,
        advance=clock.advance,
        exact_clock=True,
        close=backend.close,
        result_ttl=RESULT_TTL,
        corruptions=corruptions(backend),
    )


class PoisonReleasingBackend(MemoryBackend):
    """A broken backend, as the memory, PostgreSQL and SQLite backends were: release() reads
    every task it gives back, so one corrupt record raises for the whole batch."""

    def release(
        self, leases: Sequence[Lease], delay: timedelta = timedelta(0)
    ) -> list[TaskResult | None]:
        for lease in leases:
            self.get(lease.task_id)
        return super().release(leases, delay)


class PoisonMarkingBackend(MemoryBackend):
    """A broken backend: mark_started() reads every task it marks (to check its worker, say),
    so one corrupt record raises for the whole heartbeat."""

    def mark_started(self, leases: Sequence[Lease]) -> list[bool]:
        for lease in leases:
            self.get(lease.task_id)
        return super().mark_started(leases)


@pytest.mark.parametrize(
    ("broken", "scenario", "rule"),
    [
        (
            PoisonReleasingBackend,
            "a_corrupt_running_record_never_costs_its_batch_its_release",
            "corrupt RUNNING records: release() must give back every good task",
        ),
        (
            PoisonMarkingBackend,
            "a_corrupt_running_record_never_costs_its_batch_its_marks_or_progress",
            "corrupt RUNNING records: mark_started() must take every good task",
        ),
    ],
)
def test_a_scenario_names_the_rule_a_broken_backend_breaks(
    broken: Callable[..., MemoryBackend], scenario: str, rule: str
) -> None:
    """The scenario written for a bug fails on a backend with that bug, naming its rule."""
    harness = harness_of(broken)
    try:
        with pytest.raises(ProtocolViolation) as failure:
            SCENARIOS[scenario](harness)
    finally:
        harness.close()
    assert str(failure.value).startswith(rule), failure.value
