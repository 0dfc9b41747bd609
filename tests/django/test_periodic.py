"""``from threadmill_django import periodic``: schedules on Django tasks, run and steered."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.core.management import call_command

from tests.django.bench import Bench
from tests.django.djapp import tasks
from threadmill_core import InvalidSchedule, TaskResultStatus, Tick
from threadmill_core.periodic import registered_schedules, unregister_schedule
from threadmill_core.worker.scheduling import Scheduler
from threadmill_django import periodic


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    tasks.RUNS.clear()
    for name in registered_schedules():
        unregister_schedule(name)
    yield
    for name in registered_schedules():
        unregister_schedule(name)


def test_a_schedule_on_a_django_task_stores_its_ticks_as_the_alias_enqueues(
    bench: Bench,
) -> None:
    """@periodic above @task: each tick stored on the task's queue, run by a worker, with
    its arguments; the task reads its schedule and tick from Django's context."""
    now = {"catch_up": timedelta(0)}  # only the tick due now (the clock stands on one)
    periodic(every=timedelta(minutes=5), kwargs={"label": "tick"}, name="dj-note", **now)(
        tasks.note
    )
    periodic(every=timedelta(minutes=5), name="dj-tick", **now)(tasks.remember_tick)
    Scheduler(bench.broker.backend, registered_schedules().values()).run_pass(
        bench.broker.backend.now()
    )
    [stored] = bench.broker.backend.peek("high", TaskResultStatus.READY)
    assert stored.kwargs == {"label": "tick"}
    assert bench.work("high", "default") == 2
    ticks = [run for run in tasks.RUNS if isinstance(run, Tick)]
    assert "tick" in tasks.RUNS
    [tick] = ticks
    assert tick.schedule == "dj-tick"
    assert tick.manual is False


@pytest.mark.parametrize(
    ("target", "options", "words"),
    [
        (lambda: tasks.add.func, {"cron": "* * * * *"}, "goes on a Django task"),
        (lambda: tasks.add, {"cron": "* * * * *", "args": [1, 2, 3]}, "too many positional"),
        (lambda: tasks.add, {"cron": "* * * * *", "args": [object(), 1]}, "args[0]"),
        (lambda: tasks.add, {"cron": "61 * * * *", "args": [1, 2]}, "bad cron expression"),
        (lambda: tasks.add, {"cron": "* * * * *", "tz": "Nowhere/Else"}, "unknown time zone"),
        (lambda: tasks.add, {"cron": "* * * * *", "args": "12"}, "args must be a list or tuple"),
        (
            lambda: tasks.add,
            {"cron": "* * * * *", "kwargs": [("a", 1), ("b", 2)]},
            "kwargs must be a dict",
        ),
    ],
)
def test_a_bad_django_schedule_is_refused_at_declaration(
    target: object, options: dict[str, object], words: str
) -> None:
    """A plain function, arguments that do not fit or carry, a bad expression or zone: refused."""
    with pytest.raises(InvalidSchedule, match=words.replace("[", r"\[").replace("]", r"\]")):
        periodic(**options)(target())  # type: ignore[arg-type, operator]
    assert registered_schedules() == {}


def test_manage_py_threadmill_schedules_lists_and_pauses(
    bench: Bench, capsys: pytest.CaptureFixture[str]
) -> None:
    """manage.py threadmill schedules --json lists the schedules; pause NAME stores the pause."""
    periodic(cron="0 3 * * *", tz="Europe/Berlin", args=[1, 2], name="nightly-add")(tasks.add)
    call_command("threadmill", "schedules", "pause", "nightly-add")
    capsys.readouterr()
    call_command("threadmill", "schedules", "--json")
    [row] = json.loads(capsys.readouterr().out)
    assert row["name"] == "nightly-add"
    assert row["task"] == "tests.django.djapp.tasks:add"
    assert row["tz"] == "Europe/Berlin"
    assert row["paused"] is True
