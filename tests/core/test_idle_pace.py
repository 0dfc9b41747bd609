"""How often an idle worker and the maintenance loop call the backend, and what wakes them.

The backend is the memory backend behind `FlakyBackend` with no fault cued,
which counts every call. Nothing here asserts how fast anything happens:
only which calls were made, so the tests do not depend on the machine's speed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from datetime import timedelta

import pytest

from tests.core import tasks
from tests.faults.flaky import FlakyBackend
from tests.faults.runs import wait_until
from threadmill_core import Broker, FakeClock, TaskResultStatus, Worker
from threadmill_core.worker.steps import QUIET_WAITS_PER_CLAIM
from threadmill_core.worker.supervisor import Supervisor, WorkerSettings
from threadmill_memory import MemoryBackend

LEASE_TTL = timedelta(seconds=30)
REAPER_EVERY = (LEASE_TTL / 3).total_seconds()


class QuietWaits(FlakyBackend):
    """Waits that sleep out their timeout and never report a wake-up, as if every one was lost."""

    def wait_for_tasks(self, queues: Sequence[str], timeout: timedelta) -> bool:
        self.calls["wait_for_tasks"] += 1
        time.sleep(max(timeout.total_seconds(), 0.0))
        return False


class CannotTell(FlakyBackend):
    """A backend that cannot say when a deferred task falls due (the `Backend` default)."""

    def next_due(self) -> timedelta | None:
        self.calls["next_due"] += 1
        return None


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def counted(clock: FakeClock) -> FlakyBackend:
    return FlakyBackend(MemoryBackend(clock=clock))


@pytest.fixture
def running() -> Iterator[list[Worker]]:
    """Workers a test starts with `start`; each is stopped and joined afterwards."""
    workers: list[Worker] = []
    yield workers
    for w in workers:
        w.stop()


def start(workers: list[Worker], backend: FlakyBackend, **options: object) -> threading.Thread:
    w = Worker(Broker(backend, url="counted+memory://"), queues=["default"], **options)  # type: ignore[arg-type]  # options are passed through as given
    workers.append(w)
    runner = threading.Thread(target=w.run, name="idle-worker", daemon=True)
    runner.start()
    return runner


# --- an idle worker ----------------------------------------------------------------------


def test_without_maintenance_an_idle_worker_claims_when_woken_or_after_many_quiet_waits(
    counted: FlakyBackend, running: list[Worker]
) -> None:
    """Quiet waits are followed by a claim only every QUIET_WAITS_PER_CLAIM; a wake-up, at once."""
    runner = start(running, counted, poll_interval=timedelta(milliseconds=5), maintenance=False)
    wait_until(
        lambda: counted.calls["wait_for_tasks"] > 3 * QUIET_WAITS_PER_CLAIM, 60, "quiet waits"
    )
    waits, claims = counted.calls["wait_for_tasks"], counted.calls["claim"]
    # The first claim, then one per QUIET_WAITS_PER_CLAIM quiet waits (a lost wake-up's net).
    assert 3 <= claims <= waits // QUIET_WAITS_PER_CLAIM + 2, (claims, waits)
    assert counted.calls["next_due"] <= claims + 1, "next_due is asked once per empty claim"
    assert counted.calls["claim_expired"] == counted.calls["promote_due"] == 0

    waits = counted.calls["wait_for_tasks"]
    record = tasks.echo.using(broker=Broker(counted)).enqueue("woken")
    wait_until(lambda: counted.get(record.id).status is TaskResultStatus.SUCCESSFUL, 60, "the task")
    assert counted.calls["wait_for_tasks"] - waits < QUIET_WAITS_PER_CLAIM, "woken, not polled"
    running[0].stop()
    runner.join(timeout=60)
    assert not runner.is_alive(), "stop() ends an idle wait within a poll interval"


def test_with_its_own_maintenance_an_idle_worker_claims_after_every_wait(
    counted: FlakyBackend, running: list[Worker]
) -> None:
    """A worker running its own mover claims (and maintains) after every idle wait, as before."""
    start(running, counted, poll_interval=timedelta(milliseconds=5))
    wait_until(lambda: counted.calls["wait_for_tasks"] >= 10, 60, "idle waits")
    running[0].stop()
    assert counted.calls["claim"] >= 10
    assert counted.calls["next_due"] == 0


def test_an_idle_worker_claims_when_a_deferred_task_falls_due(running: list[Worker]) -> None:
    """A worker whose waits stay quiet claims a deferred task at its due time, not on its net."""
    quiet = QuietWaits(MemoryBackend())  # the system clock: due times pass in real time
    deferred = tasks.echo.using(broker=Broker(quiet), run_after=timedelta(milliseconds=500))
    record = deferred.enqueue("due")
    start(running, quiet, poll_interval=timedelta(seconds=5), maintenance=False)
    wait_until(lambda: quiet.get(record.id).status is TaskResultStatus.SUCCESSFUL, 60, "the task")
    # Without next_due it would have waited out QUIET_WAITS_PER_CLAIM quiet waits of 5 s.
    assert quiet.calls["next_due"] >= 1
    assert quiet.calls["wait_for_tasks"] < QUIET_WAITS_PER_CLAIM


# --- the maintenance loop ------------------------------------------------------------------


def supervisor(**settings: object) -> Supervisor:
    options: dict[str, object] = {
        "broker_url": "redis://unused",
        "modules": (),
        "lease_ttl": LEASE_TTL,
        "poll_interval": timedelta(seconds=1),
    }
    options.update(settings)
    return Supervisor(WorkerSettings(**options))  # type: ignore[arg-type]  # options are passed through as given


def test_idle_maintenance_sleeps_until_the_reapers_turn(counted: FlakyBackend) -> None:
    """With nothing deferred, a pass reaps once and plans the next for a third of a lease later."""
    loop = supervisor()
    first = loop._maintain(counted)
    assert REAPER_EVERY - 1 < first <= REAPER_EVERY
    again = loop._maintain(counted)  # called early: the reaper is not due yet
    assert again <= first
    assert (counted.calls["claim_expired"], counted.calls["next_due"]) == (1, 2)
    assert counted.calls["promote_due"] == 0, "nothing is due, so the mover is not called"


def test_maintenance_wakes_for_a_deferred_task_when_it_falls_due(
    counted: FlakyBackend, clock: FakeClock
) -> None:
    """The next pass is planned for the due time; that pass promotes the task, then looks again."""
    loop = supervisor()
    record = tasks.echo.using(
        broker=Broker(counted), run_after=timedelta(seconds=2, milliseconds=500)
    ).enqueue("later")
    assert loop._maintain(counted) == 2.5, "the pass sleeps until the task is due"
    assert counted.calls["promote_due"] == 0
    clock.advance(timedelta(seconds=2, milliseconds=500))
    assert loop._maintain(counted) == 0.0, "promoted: look again at once, more may be due"
    assert counted.get(record.id).status is TaskResultStatus.READY
    assert loop._maintain(counted) <= REAPER_EVERY
    assert counted.calls["promote_due"] == 1
    assert counted.calls["claim_expired"] == 1, "the reaper keeps its own pace"


def test_maintenance_on_a_backend_that_cannot_tell_polls_as_before(clock: FakeClock) -> None:
    """next_due None: every pass reaps and promotes, one poll interval apart."""
    blind = CannotTell(MemoryBackend(clock=clock))
    loop = supervisor()
    assert [loop._maintain(blind) for _ in range(3)] == [1.0] * 3
    assert blind.calls["claim_expired"] == blind.calls["promote_due"] == 3
