"""The kit itself: no false alarms on a clock it does not control, a named rule for a bug."""

from collections.abc import Sequence
from datetime import datetime, timedelta

import attrs
import pytest
from hypothesis import Phase, settings

import threadmill_core.testing
from tests.conftest import RESULT_TTL
from threadmill_core.clock import FakeClock
from threadmill_core.models import Lease, TaskResult
from threadmill_core.testing import Harness, ProtocolViolation, on_fake_clock, run_machine
from threadmill_memory import MemoryBackend

pytestmark = pytest.mark.memory


class CreepingClock(FakeClock):
    """A fake clock that also moves a millisecond at every reading, as a server's clock does."""

    def now(self) -> datetime:
        self.advance(timedelta(milliseconds=1))
        return super().now()


def creeping_memory_harness() -> Harness:
    clock = CreepingClock()
    backend = MemoryBackend(clock=clock, result_ttl=RESULT_TTL)
    return Harness(
        backend=backend,
        advance=clock.advance,
        exact_clock=False,
        close=backend.close,
        result_ttl=RESULT_TTL,
    )


def test_machine_tolerates_a_clock_that_creeps() -> None:
    """On a backend with exact_clock False, real time passing between calls is not a violation."""
    # A quarter of the profile's examples: this guards the kit, not a backend.
    run_machine(creeping_memory_harness, settings(max_examples=settings().max_examples // 4))


class TokenBlindBackend(MemoryBackend):
    """A broken backend: complete() ignores the lease's token, as if its check were left out.

    It decides with the newest token it issued for the task instead, so a
    stale lease (or a made-up one) finalizes the task like the current one.
    """

    def __init__(self, *, clock: FakeClock) -> None:
        super().__init__(clock=clock, result_ttl=RESULT_TTL)
        self.newest: dict[str, str] = {}

    def claim(
        self, queues: Sequence[str], *, worker: str, lease_ttl: timedelta, limit: int = 1
    ) -> list[Lease]:
        return self.remember(super().claim(queues, worker=worker, lease_ttl=lease_ttl, limit=limit))

    def claim_expired(self, *, limit: int, claim_ttl: timedelta) -> list[Lease]:
        return self.remember(super().claim_expired(limit=limit, claim_ttl=claim_ttl))

    def remember(self, leases: list[Lease]) -> list[Lease]:
        self.newest.update((lease.task_id, lease.token) for lease in leases)
        return leases

    def complete(self, lease: Lease, record: TaskResult) -> TaskResult | None:
        token = self.newest.get(lease.task_id, lease.token)
        return super().complete(
            Lease(token=token, deadline=lease.deadline, record=lease.record), record
        )


def test_machine_names_the_rule_a_backend_breaks() -> None:
    """A backend whose complete() ignores the token fails the machine with that rule named."""
    quick = settings(
        # Room to spare: derandomized data still draws on the constants Hypothesis finds in
        # the project's modules loaded so far, so which example finds the bug depends on
        # the tests that ran first (after tests/postgres, one past the 500th did). The
        # test stops at the first failure, so the room costs nothing when it is not needed.
        max_examples=2000,
        stateful_step_count=20,
        phases=[Phase.generate],  # the first failure is enough; shrinking it takes long
        derandomize=True,
        database=None,
    )
    factory = on_fake_clock(lambda clock: TokenBlindBackend(clock=clock), result_ttl=RESULT_TTL)
    with pytest.raises(ProtocolViolation) as failure:
        run_machine(factory, quick)
    rule, step = str(failure.value).splitlines()[:2]
    # Which stale lease hypothesis tries first is its choice; each is named as such.
    assert rule.startswith(
        (
            "complete() accepted a stale token",
            "complete() accepted a token it never issued",
            "complete() accepted a token that",  # a give-back, release, requeue or cancel cleared
            "complete() accepted a lease from before the task was purged",
        )
    ), rule
    assert step.strip().startswith("during:"), step
    steps = "\n".join(getattr(failure.value, "__notes__", []))
    assert "state.claim(" in steps, steps


def test_every_public_name_of_the_kit_imports() -> None:
    """Each name in threadmill_core.testing.__all__ resolves, though the package imports lazily."""
    kit = threadmill_core.testing
    assert sorted(kit.__all__) == sorted(kit._HOMES)
    for name in kit.__all__:
        assert getattr(kit, name) is not None, name


class StartBlindBackend(MemoryBackend):
    """A broken backend: mark_started() answers as it should but records nothing."""

    def mark_started(self, leases: Sequence[Lease]) -> list[bool]:
        answers = super().mark_started(leases)
        for lease in leases:  # forget the marks: every claim stays unstarted
            self._store.put(attrs.evolve(self._store[lease.task_id], started=False))
        return answers


class ChargingBackend(MemoryBackend):
    """A broken backend, as every backend was before recorded starts: each claim counts as
    started, so an expired prefetch is charged through the reaper and release() refuses it."""

    def claim(
        self, queues: Sequence[str], *, worker: str, lease_ttl: timedelta, limit: int = 1
    ) -> list[Lease]:
        leases = super().claim(queues, worker=worker, lease_ttl=lease_ttl, limit=limit)
        super().mark_started(leases)
        return leases


@pytest.mark.parametrize(
    ("broken", "rules"),
    [
        (
            StartBlindBackend,
            (
                "claim_expired() gave back task",
                "release() accepted a lease whose start was recorded",
            ),
        ),
        (
            ChargingBackend,
            (
                "claim_expired() charged task",
                "release() refused a current token",
            ),
        ),
    ],
)
def test_machine_names_a_broken_rule_of_recorded_starts(
    broken: type[MemoryBackend], rules: tuple[str, ...]
) -> None:
    """A backend that forgets recorded starts, or charges claims that never started, fails the
    machine with the rule it broke named."""
    quick = settings(
        max_examples=500,
        stateful_step_count=20,
        phases=[Phase.generate],
        derandomize=True,
        database=None,
    )
    factory = on_fake_clock(lambda clock: broken(clock=clock, result_ttl=RESULT_TTL),
                            result_ttl=RESULT_TTL)  # fmt: skip
    with pytest.raises(ProtocolViolation) as failure:
        run_machine(factory, quick)
    rule = str(failure.value).splitlines()[0]
    assert rule.startswith(rules), rule
