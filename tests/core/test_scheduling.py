"""The scheduler on the memory backend and a fake clock: each tick stored once, catch-up, overlap,
pauses."""

from __future__ import annotations

import importlib
import itertools
import logging
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from cronsim import CronSim

from tests.core import periodic_tasks
from threadmill_core import FakeClock, TaskResultStatus
from threadmill_core.periodic import (
    CATCH_UP_TICKS,
    Schedule,
    add_schedule,
    registered_schedules,
    tick_id,
    unregister_schedule,
)
from threadmill_core.testing.scenarios import succeeded
from threadmill_core.worker.scheduling import OVERLAP_LOOK_BACK, Scheduler, due
from threadmill_memory import MemoryBackend

START = datetime(2026, 6, 1, 12, 0, 0, 250_000, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _no_schedules_left() -> Iterator[None]:
    for name in registered_schedules():  # what a document's example declared, say
        unregister_schedule(name)
    yield
    for name in registered_schedules():
        unregister_schedule(name)


def every(seconds: float, **options: object) -> Schedule:
    return add_schedule(periodic_tasks.poll, every=timedelta(seconds=seconds), **options)


def stored_ids(backend: MemoryBackend) -> list[str]:
    records = []
    for status in (TaskResultStatus.READY, TaskResultStatus.DEFERRED, TaskResultStatus.RUNNING):
        records += backend.peek("default", status, limit=100_000)
    return sorted(record.id for record in records)


def test_five_schedulers_interleaved_on_one_clock_store_each_tick_once() -> None:
    """Five schedulers waking in random order on one clock store each tick exactly once."""
    clock = FakeClock(START)
    backend = MemoryBackend(clock=clock)
    fast, slow = every(1, name="fast"), every(7, name="slow", args=["eu"])
    schedulers = [Scheduler(backend, [fast, slow]) for _ in range(5)]
    for scheduler in schedulers:  # all start together: each looks back the same window
        scheduler.run_pass(clock.now())
    rng = random.Random(34)
    for _ in range(600):
        clock.advance(timedelta(milliseconds=rng.choice([50, 300, 1000, 2500])))
        for scheduler in rng.sample(schedulers, k=rng.randint(1, 5)):
            scheduler.run_pass(clock.now())
    end = clock.now()
    for scheduler in schedulers:
        scheduler.run_pass(end)
    expected = sorted(
        tick_id(schedule.name, tick)
        for schedule in (fast, slow)
        for tick in _ticks(schedule, START - schedule.catch_up, end)
    )
    assert stored_ids(backend) == expected
    record = backend.get(tick_id("slow", slow.next_tick(START)))
    assert record is not None
    assert (record.args, record.run_after) == (["eu"], slow.next_tick(START))


def _ticks(schedule: Schedule, after: datetime, until: datetime) -> list[datetime]:
    """The ticks in (after, until], at most CATCH_UP_TICKS of them before `START`."""
    got, tick = [], schedule.next_tick(after)
    while tick <= until:
        got.append(tick)
        tick = schedule.next_tick(tick)
    before = [t for t in got if t <= START]
    return before[-CATCH_UP_TICKS:] + [t for t in got if t > START]


def test_missed_ticks_within_the_window_are_caught_up_once_each_older_skipped_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """After downtime: ticks inside catch_up are stored, the rest skipped with a warning."""
    clock = FakeClock(START)
    backend = MemoryBackend(clock=clock)
    schedule = every(60, catch_up=timedelta(minutes=5))
    scheduler = Scheduler(backend, [schedule])
    scheduler.run_pass(clock.now())
    assert len(stored_ids(backend)) == 5  # a fresh scheduler looks back the window: 5 minutes
    clock.advance(timedelta(hours=1))  # down for an hour
    with caplog.at_level(logging.WARNING, logger="threadmill.schedules"):
        scheduler.run_pass(clock.now())
    assert len(stored_ids(backend)) == 5 + 5
    assert "55 missed tick(s)" in caplog.text


def test_catch_up_never_bursts_past_its_tick_limit() -> None:
    """However long the window, a pass stores at most CATCH_UP_TICKS missed ticks."""
    found = due(every(1), START - timedelta(minutes=30), START)
    assert len(found.ticks) == CATCH_UP_TICKS
    assert found.skipped == 30 * 60 - CATCH_UP_TICKS
    assert found.ticks[-1] == START.replace(microsecond=0)


def test_a_cron_catch_up_walks_a_bounded_number_of_ticks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh scheduler's look back over a long window of a frequent cron reads a bounded
    number of ticks (the latest, and a count of at most 10,000 of the rest), not every tick."""
    read = [0]

    class CountingCronSim(CronSim):
        def __next__(self) -> datetime:
            read[0] += 1
            return super().__next__()

    # The module, not the `periodic` decorator the package exports under its name.
    monkeypatch.setattr(
        importlib.import_module("threadmill_core.periodic"), "CronSim", CountingCronSim
    )
    schedule = add_schedule(periodic_tasks.poll, cron="* * * * * *", catch_up=timedelta(days=1))
    found = due(schedule, None, START)
    assert len(found.ticks) == CATCH_UP_TICKS
    assert found.ticks[-1] == START.replace(microsecond=0)
    assert [b - a for a, b in itertools.pairwise(found.ticks)] == [timedelta(seconds=1)] * (
        CATCH_UP_TICKS - 1
    )
    assert read[0] < 11_000  # a day of seconds is 86,400 ticks


def test_overlap_false_skips_ticks_while_the_previous_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """overlap=False stores no tick while an earlier tick's task is pending or running."""
    clock = FakeClock(START)
    backend = MemoryBackend(clock=clock)
    schedule = every(10, overlap=False, catch_up=timedelta(0))
    scheduler = Scheduler(backend, [schedule])
    scheduler.run_pass(clock.now())  # a tick 0.25 s late is stored, whatever catch_up
    [first] = stored_ids(backend)
    lease = backend.claim(["default"], worker="w", lease_ttl=timedelta(minutes=5))[0]
    assert lease.task_id == first
    with caplog.at_level(logging.INFO, logger="threadmill.schedules"):
        for _ in range(3):  # three ticks while it runs: none stored
            clock.advance(timedelta(seconds=10))
            scheduler.run_pass(clock.now())
    assert stored_ids(backend) == [first]
    assert "(overlap=False)" in caplog.text
    backend.complete(lease, succeeded(lease))
    clock.advance(timedelta(seconds=10))
    scheduler.run_pass(clock.now())
    assert stored_ids(backend) == [tick_id(schedule.name, clock.now().replace(microsecond=0))]


def test_overlap_false_catching_up_stores_only_the_latest_due_tick(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """overlap=False after downtime: of the ticks due, only the latest is stored, and the
    next waits for it; never several pending at once."""
    clock = FakeClock(START + timedelta(seconds=30))  # 12:00:30: ticks 11:01 .. 12:00 are due
    backend = MemoryBackend(clock=clock)
    schedule = every(60, overlap=False)
    scheduler = Scheduler(backend, [schedule])
    with caplog.at_level(logging.INFO, logger="threadmill.schedules"):
        scheduler.run_pass(clock.now())
    latest = tick_id(schedule.name, datetime(2026, 6, 1, 12, 0, tzinfo=UTC))
    assert stored_ids(backend) == [latest]
    assert "9 earlier due tick(s) not stored" in caplog.text
    clock.advance(timedelta(minutes=1))
    scheduler.run_pass(clock.now())  # 12:01: the 12:00 task is still READY
    assert stored_ids(backend) == [latest]


def test_overlap_false_holds_for_a_scheduler_that_did_not_store_the_running_tick() -> None:
    """A scheduler started while a tick's task runs (the ticks since skipped, so never
    stored) finds it by walking back over the skipped ticks, and stores nothing either."""
    clock = FakeClock(START)
    backend = MemoryBackend(clock=clock)
    schedule = every(60, overlap=False, catch_up=timedelta(0))
    first = Scheduler(backend, [schedule])
    first.run_pass(clock.now())  # stores the 12:00 tick
    [running] = stored_ids(backend)
    [lease] = backend.claim(["default"], worker="w", lease_ttl=timedelta(hours=2))
    for _ in range(5):  # 12:01 .. 12:05: skipped, the 12:00 task runs
        clock.advance(timedelta(minutes=1))
        first.run_pass(clock.now())
    second = Scheduler(backend, [schedule])  # a worker restarted, or one more
    second.run_pass(clock.now())
    clock.advance(timedelta(minutes=1))
    for scheduler in (first, second):
        scheduler.run_pass(clock.now())
    assert stored_ids(backend) == [running]
    backend.complete(lease, succeeded(lease))
    clock.advance(timedelta(minutes=1))
    for scheduler in (second, first):
        scheduler.run_pass(clock.now())
    assert stored_ids(backend) == [tick_id(schedule.name, clock.now().replace(microsecond=0))]


def test_overlap_false_looks_back_a_bounded_number_of_ticks() -> None:
    """A task pending longer than OVERLAP_LOOK_BACK ticks is not seen by a scheduler that did
    not store it: the documented bound of the walk back."""
    clock = FakeClock(START)
    backend = MemoryBackend(clock=clock)
    schedule = every(1, overlap=False, catch_up=timedelta(0))
    Scheduler(backend, [schedule]).run_pass(clock.now())
    [old] = stored_ids(backend)
    clock.advance(timedelta(seconds=OVERLAP_LOOK_BACK))
    Scheduler(backend, [schedule]).run_pass(clock.now())
    assert stored_ids(backend) == [old]  # the old tick is OVERLAP_LOOK_BACK ticks back: seen
    clock.advance(timedelta(seconds=1))
    Scheduler(backend, [schedule]).run_pass(clock.now())
    assert len(stored_ids(backend)) == 2


def test_a_paused_schedule_stores_nothing_and_does_not_catch_up_when_resumed() -> None:
    """Paused: no tick stored by any scheduler; resumed: none of the paused ticks come back."""
    clock = FakeClock(START)
    backend = MemoryBackend(clock=clock)
    schedule = every(60)
    backend.set_schedule_paused(schedule.name, True)
    Scheduler(backend, [schedule]).run_pass(clock.now())
    clock.advance(timedelta(minutes=10))
    Scheduler(backend, [schedule]).run_pass(clock.now())
    assert stored_ids(backend) == []
    backend.set_schedule_paused(schedule.name, False)
    fresh = Scheduler(backend, [schedule])  # would look back an hour
    fresh.run_pass(clock.now())
    assert stored_ids(backend) == []
    clock.advance(timedelta(minutes=1))
    fresh.run_pass(clock.now())
    assert len(stored_ids(backend)) == 1


def test_a_ticks_task_reads_its_schedule_and_tick_from_its_context() -> None:
    """A worker running a tick's task gives it a context that tick_of reads: schedule, time."""
    from threadmill_core import Broker, Tick, Worker

    clock = FakeClock(START)
    backend = MemoryBackend(clock=clock)
    schedule = add_schedule(
        periodic_tasks.where_from, every=timedelta(minutes=1), name="where", catch_up=timedelta(0)
    )
    periodic_tasks.seen.clear()
    clock.advance(timedelta(seconds=30))  # 12:00:30.25, the 12:00 tick 30 s late: not stored
    Scheduler(backend, [schedule]).run_pass(clock.now())
    clock.advance(timedelta(seconds=30))
    Scheduler(backend, [schedule]).run_pass(clock.now())
    with Broker(backend) as broker:
        assert Worker(broker, queues=["default"], threads=1).run(burst=True) == 1
    assert periodic_tasks.seen == [
        Tick(schedule="where", at=datetime(2026, 6, 1, 12, 1, tzinfo=UTC))
    ]
