"""@periodic: declaring schedules, refusing bad ones, and their ticks (a pure function of time)."""

from __future__ import annotations

import itertools
import zoneinfo
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from cronsim import CronSim

from tests.core import periodic_tasks
from threadmill_core import InvalidSchedule, periodic
from threadmill_core.periodic import (
    Schedule,
    add_schedule,
    registered_schedules,
    run_id,
    tick_id,
    tick_of,
    unregister_schedule,
)


@pytest.fixture(autouse=True)
def _no_schedules_left() -> Iterator[None]:
    for name in registered_schedules():  # what a document's example declared, say
        unregister_schedule(name)
    yield
    for name in registered_schedules():
        unregister_schedule(name)


def declare(**options: object) -> Schedule:
    return add_schedule(periodic_tasks.poll, **options)


def test_stacked_decorators_register_both_schedules_and_return_the_task() -> None:
    """@periodic stacked on @task() registers each schedule and leaves the task as it was."""
    made = periodic(cron="0 3 * * *", tz="Europe/Berlin")(
        periodic(every=timedelta(seconds=30), kwargs={"region": "eu"}, name="poll-eu")(
            periodic_tasks.poll
        )
    )
    assert made is periodic_tasks.poll
    schedules = registered_schedules()
    assert set(schedules) == {"tests.core.periodic_tasks:poll", "poll-eu"}
    nightly = schedules["tests.core.periodic_tasks:poll"]
    assert (nightly.cron, nightly.tz, nightly.task_path) == (
        "0 3 * * *",
        "Europe/Berlin",
        "tests.core.periodic_tasks:poll",
    )
    assert schedules["poll-eu"].kwargs == {"region": "eu"}


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"cron": "0 3 * *"}, "has 4 fields"),
        ({"cron": "61 3 * * *"}, "bad cron expression '61 3 * * *'"),
        ({"cron": "0 3 31 2 *"}, "bad cron expression"),
        ({"cron": "0 3 * * *", "tz": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
        ({"every": timedelta(seconds=30), "tz": "UTC"}, "tz= goes with cron="),
        ({"every": timedelta(milliseconds=500)}, "at least 0:00:01"),
        ({"every": 30}, "every must be a timedelta"),
        ({}, "exactly one of cron= and every="),
        ({"cron": "* * * * *", "every": timedelta(seconds=1)}, "exactly one of"),
        ({"cron": "* * * * *", "args": ["eu", "extra"]}, "too many positional arguments"),
        ({"cron": "* * * * *", "kwargs": {"zone": "eu"}}, "unexpected keyword argument 'zone'"),
        ({"cron": "* * * * *", "args": [object()]}, "args[0]"),
        ({"cron": "* * * * *", "args": "eu"}, "args must be a list or tuple"),
        ({"cron": "* * * * *", "name": ""}, "non-empty printable str"),
        ({"cron": "* * * * *", "overlap": "no"}, "overlap must be True or False"),
        ({"cron": "* * * * *", "catch_up": timedelta(-1)}, "catch_up must be a timedelta"),
        ({"every": timedelta(days=3_000_000)}, "at most 365,000 days"),
        ({"every": timedelta(seconds=5), "catch_up": timedelta(days=800_000)}, "catch_up"),
        ({"cron": "* * * * *", "catch_up": timedelta.max}, "at most 365,000 days"),
    ],
)
def test_a_bad_schedule_is_refused_at_declaration_naming_the_problem(
    options: dict[str, object], words: str
) -> None:
    """A bad expression, zone, interval, argument or option raises InvalidSchedule; none kept."""
    with pytest.raises(InvalidSchedule, match=_escaped(words)):
        declare(**options)
    assert registered_schedules() == {}


def _escaped(words: str) -> str:
    import re

    return re.escape(words)


def test_two_schedules_under_one_name_are_refused_and_the_first_kept() -> None:
    """A second, different schedule named like a registered one is refused; the first stays."""
    first = declare(cron="0 3 * * *")
    with pytest.raises(
        InvalidSchedule, match=r"two schedules are named 'tests\.core\.periodic_tasks:poll'"
    ):
        declare(every=timedelta(minutes=5))
    assert registered_schedules() == {first.name: first}
    assert declare(cron="0 3 * * *") == first  # the same declaration again (a re-import) is fine


def test_periodic_refuses_what_is_not_a_task() -> None:
    """@periodic on a plain function (not stacked on @task()) says to stack it."""
    with pytest.raises(InvalidSchedule, match=r"stack it above @task\(\)"):
        periodic(cron="* * * * *")(periodic_tasks.not_a_task)
    assert registered_schedules() == {}


EXPRESSIONS = [
    "*/5 * * * *",
    "0 3 * * *",
    "30 2 * * *",
    "15 9-17 * * 1-5",
    "0 0 1,15 * *",
    "0 12 L * *",
    "0 8 * * MON#1",
    "*/20 */7 * * * *",
]


@pytest.mark.parametrize("expression", EXPRESSIONS)
@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin", "America/New_York"])
def test_a_year_of_ticks_is_cronsims_own_iteration(expression: str, zone: str) -> None:
    """next_tick, applied a year long, gives the ticks cronsim's iteration gives, as instants."""
    schedule = declare(cron=expression, tz=None if zone == "UTC" else zone, name=expression)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    end = start + timedelta(days=30 if expression.startswith("*/") else 365)
    expected = [
        tick.astimezone(UTC)
        for tick in itertools.takewhile(
            lambda tick: tick.astimezone(UTC) <= end,
            CronSim(expression, start.astimezone(zoneinfo.ZoneInfo(zone))),
        )
    ]
    got = []
    tick = schedule.next_tick(start)
    while tick <= end:
        got.append(tick)
        tick = schedule.next_tick(tick)
    # cronsim's wall-clock iteration may give a fall-back night's tick before the one
    # it gave last; ours never goes back, and gives each instant once.
    assert got == sorted(set(expected))
    assert len(got) >= 12


BERLIN_SPRING = datetime(2026, 3, 29, tzinfo=zoneinfo.ZoneInfo("Europe/Berlin"))
BERLIN_FALL = datetime(2026, 10, 25, tzinfo=zoneinfo.ZoneInfo("Europe/Berlin"))
NEW_YORK_SPRING = datetime(2026, 3, 8, tzinfo=zoneinfo.ZoneInfo("America/New_York"))
NEW_YORK_FALL = datetime(2026, 11, 1, tzinfo=zoneinfo.ZoneInfo("America/New_York"))


def ticks_between(schedule: Schedule, start: datetime, end: datetime) -> list[datetime]:
    got, tick = [], schedule.next_tick(start)
    while tick < end:
        got.append(tick)
        tick = schedule.next_tick(tick)
    return got


@pytest.mark.parametrize(
    ("zone", "night", "expression", "local"),
    [
        ("Europe/Berlin", BERLIN_SPRING, "30 2 * * *", "03:00:00+02:00"),
        ("Europe/Berlin", BERLIN_FALL, "30 2 * * *", "02:30:00+02:00"),
        ("America/New_York", NEW_YORK_SPRING, "30 2 * * *", "03:00:00-04:00"),
        ("America/New_York", NEW_YORK_FALL, "30 1 * * *", "01:30:00-04:00"),
    ],
)
def test_a_daily_job_in_the_changed_hour_runs_once_on_a_daylight_saving_night(
    zone: str, night: datetime, expression: str, local: str
) -> None:
    """A daily job at a time the night skips runs once just after the gap; at a time the
    night repeats, once, at its first occurrence."""
    schedule = declare(cron=expression, tz=zone)
    start = night - timedelta(hours=12)
    ticks = ticks_between(schedule, start, start + timedelta(hours=24))
    assert [tick.astimezone(zoneinfo.ZoneInfo(zone)).isoformat()[11:] for tick in ticks] == [local]
    # From inside a fall-back night's repeated hour (after the first 02:30, before the
    # second): the next tick is the next night's, never one before where we stand.
    later = ticks[0] + timedelta(minutes=90)
    assert schedule.next_tick(later) - ticks[0] >= timedelta(hours=23)


def test_a_every_15_minutes_job_follows_real_time_through_fall_back() -> None:
    """*/15 ticks every real quarter-hour through a fall-back night: 100 in its 25 hours."""
    zone = zoneinfo.ZoneInfo("Europe/Berlin")
    schedule = declare(cron="*/15 * * * *", tz="Europe/Berlin")
    start = BERLIN_FALL.astimezone(UTC) - timedelta(seconds=1)
    ticks = ticks_between(schedule, start, datetime(2026, 10, 26, tzinfo=zone).astimezone(UTC))
    assert len(ticks) == 100
    assert all(b - a == timedelta(minutes=15) for a, b in itertools.pairwise(ticks))


def test_intervals_tick_on_the_epochs_multiples() -> None:
    """every= ticks at whole multiples of the interval since the epoch, whoever asks."""
    schedule = declare(every=timedelta(seconds=90))
    at = datetime(2026, 5, 1, 12, 0, 1, 500, tzinfo=UTC)
    tick = schedule.next_tick(at)
    assert tick > at
    assert (tick - datetime(1970, 1, 1, tzinfo=UTC)) % timedelta(seconds=90) == timedelta(0)
    assert schedule.previous_tick(tick) == tick - timedelta(seconds=90)
    assert schedule.next_tick(tick) == tick + timedelta(seconds=90)


def test_tick_ids_are_uuid7s_of_the_tick_and_the_name_and_read_back() -> None:
    """A tick's id is a UUIDv7 whose time is the tick; tick_of reads the schedule and tick back."""
    import uuid

    schedule = declare(every=timedelta(seconds=1), name="poll-eu")
    tick = datetime(2026, 5, 1, 12, 0, 1, tzinfo=UTC)
    made = tick_id("poll-eu", tick)
    assert made == tick_id("poll-eu", tick)
    assert made != tick_id("poll-us", tick)
    assert uuid.UUID(made).version == 7
    assert int(made[:13].replace("-", ""), 16) == int(tick.timestamp() * 1000)
    assert tick_id("poll-eu", tick) < tick_id("poll-eu", tick + timedelta(milliseconds=1))
    from threadmill_core.worker.scheduling import tick_record

    record = tick_record(schedule, tick)
    assert tick_of(record) == periodic_tasks_tick("poll-eu", tick, manual=False)
    manual = run_id("poll-eu", tick)
    assert manual != made
    assert tick_of(record.__class__(id=manual, task_path=record.task_path)) == (
        periodic_tasks_tick("poll-eu", tick, manual=True)
    )
    assert tick_of(record.__class__(id="not-a-uuid", task_path=record.task_path)) is None


def periodic_tasks_tick(name: str, at: datetime, *, manual: bool) -> object:
    from threadmill_core import Tick

    return Tick(schedule=name, at=at, manual=manual)
