"""``threadmill schedules``: list, pause, resume and run schedules, on the memory backend."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from tests.core import periodic_tasks
from threadmill_core import Broker, FakeClock, TaskResultStatus
from threadmill_core.cli import main
from threadmill_core.periodic import (
    Schedule,
    add_schedule,
    registered_schedules,
    tick_of,
    unregister_schedule,
)
from threadmill_core.worker.scheduling import Scheduler
from threadmill_memory import MemoryBackend

START = datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _no_schedules_left() -> Iterator[None]:
    for name in registered_schedules():  # what a document's example declared, say
        unregister_schedule(name)
    yield
    for name in registered_schedules():
        unregister_schedule(name)


@pytest.fixture
def on_clock() -> Iterator[tuple[Broker, FakeClock]]:
    clock = FakeClock(START)
    with Broker(MemoryBackend(clock=clock), url="memory://") as made:
        yield made, clock


def test_the_listing_shows_each_schedule_its_next_and_last_tick_and_pause(
    on_clock: tuple[Broker, FakeClock], capsys: pytest.CaptureFixture[str]
) -> None:
    """schedules --json: name, task, expression, zone, next tick, last tick's outcome, paused."""
    broker, _clock = on_clock
    minutely = add_schedule(periodic_tasks.poll, cron="* * * * *", tz="Europe/Berlin")
    add_schedule(periodic_tasks.poll, every=timedelta(hours=1), name="hourly")
    Scheduler(broker.backend, [minutely]).run_pass(broker.backend.now())
    broker.backend.set_schedule_paused("hourly", True)
    assert main(["schedules", "--json"], broker=broker) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["tests.core.periodic_tasks:poll"] == {
        "name": "tests.core.periodic_tasks:poll",
        "task": "tests.core.periodic_tasks:poll",
        "expression": "* * * * *",
        "tz": "Europe/Berlin",
        "next_tick": "2026-06-01T12:01:00+00:00",
        "last_tick": "2026-06-01T12:00:00+00:00",
        "last_status": "READY",
        "paused": False,
    }
    assert rows["hourly"]["paused"] is True
    assert rows["hourly"]["last_tick"] is None
    assert main(["schedules"], broker=broker) == 0
    table = capsys.readouterr().out
    assert "every 3600s" in table
    assert "READY" in table
    assert "yes" in table


def test_pause_and_resume_are_stored_in_the_backend_for_every_scheduler(
    on_clock: tuple[Broker, FakeClock], capsys: pytest.CaptureFixture[str]
) -> None:
    """schedules pause NAME: no scheduler stores its ticks; resume NAME: the next tick is."""
    broker, clock = on_clock
    schedule = add_schedule(periodic_tasks.poll, every=timedelta(minutes=1), name="poll")
    assert main(["schedules", "pause", "poll"], broker=broker) == 0
    assert "poll: paused since 2026-06-01T12:00:30" in capsys.readouterr().out
    clock.advance(timedelta(minutes=5))
    for _ in range(3):  # three schedulers, none stores a tick
        Scheduler(broker.backend, [schedule]).run_pass(broker.backend.now())
    assert broker.backend.counts() == {}
    assert main(["schedules", "resume", "poll"], broker=broker) == 0
    clock.advance(timedelta(minutes=1))
    Scheduler(broker.backend, [schedule]).run_pass(broker.backend.now())
    [record] = broker.backend.peek("default", TaskResultStatus.READY)
    assert record.run_after == datetime(2026, 6, 1, 12, 6, tzinfo=UTC)


def test_run_enqueues_one_run_now_under_an_id_of_its_own(
    on_clock: tuple[Broker, FakeClock], capsys: pytest.CaptureFixture[str]
) -> None:
    """schedules run NAME: one READY task with the schedule's arguments, marked a manual run."""
    broker, _clock = on_clock
    add_schedule(periodic_tasks.poll, cron="0 3 * * *", kwargs={"region": "eu"}, name="nightly")
    assert main(["schedules", "run", "nightly", "--json"], broker=broker) == 0
    task_id = json.loads(capsys.readouterr().out)["id"]
    record = broker.get_result(task_id)
    assert (record.status, record.kwargs) == (TaskResultStatus.READY, {"region": "eu"})
    tick = tick_of(record)
    assert tick is not None
    assert (tick.schedule, tick.manual) == ("nightly", True)
    assert main(["schedules", "run", "nightly"], broker=broker) == 0
    assert len(broker.backend.peek("default", TaskResultStatus.READY)) == 2


def test_bad_usage_names_the_problem(
    on_clock: tuple[Broker, FakeClock], capsys: pytest.CaptureFixture[str]
) -> None:
    """pause with no name, run of an unknown schedule, a bad name: an error each, nothing stored."""
    broker, _clock = on_clock
    assert main(["schedules", "pause"], broker=broker) == 2
    assert "give the schedule's NAME" in capsys.readouterr().err
    assert main(["schedules", "run", "nope"], broker=broker) == 3
    assert "no schedule 'nope'" in capsys.readouterr().err
    assert main(["schedules", "pause", "tab\there"], broker=broker) == 2
    assert "non-empty printable str" in capsys.readouterr().err
    assert broker.backend.schedule_pauses() == {}
    assert broker.backend.counts() == {}


def test_an_embedding_program_says_which_schedules_the_commands_know(
    on_clock: tuple[Broker, FakeClock], capsys: pytest.CaptureFixture[str]
) -> None:
    """main(schedules=...) lists and runs the schedules it gives, not every one declared."""
    broker, _clock = on_clock
    mine = add_schedule(periodic_tasks.poll, every=timedelta(hours=1), name="mine")
    add_schedule(periodic_tasks.poll, every=timedelta(hours=1), name="theirs")

    def given() -> dict[str, Schedule]:
        return {"mine": mine}

    assert main(["schedules", "--json"], broker=broker, schedules=given) == 0
    assert [row["name"] for row in json.loads(capsys.readouterr().out)] == ["mine"]
    assert main(["schedules", "run", "theirs"], broker=broker, schedules=given) == 3
    assert "no schedule 'theirs' in the modules named (mine)" in capsys.readouterr().err
    assert broker.backend.peek("default", TaskResultStatus.READY) == []
