"""``from threadmill_django import periodic``: schedules on Django tasks, run and steered."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.tasks import task, task_backends

from tests.core import periodic_tasks
from tests.django.bench import Bench, two_aliases
from tests.django.djapp import tasks
from threadmill_core import Broker, InvalidSchedule, TaskResultStatus, Tick
from threadmill_core.periodic import periodic as core_periodic
from threadmill_core.periodic import registered_schedules, unregister_schedule
from threadmill_core.worker.scheduling import Scheduler
from threadmill_django import periodic
from threadmill_django.worker import parse_worker_args, worker_settings


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


@pytest.fixture
def emails(bench: Bench) -> Iterator[Broker]:
    """TASKS with a second alias, ``emails``, on a memory broker of its own (returned), and
    three schedules: ``emails-digest`` on an emails task, ``dj-add`` on a default task, and
    ``core-poll`` declared with threadmill_core's own @periodic."""
    with two_aliases(bench) as broker:
        now = {"every": timedelta(minutes=5), "catch_up": timedelta(0)}
        periodic(name="emails-digest", **now)(task(backend="emails")(tasks.send_digest))
        periodic(name="dj-add", args=[1, 2], **now)(tasks.add)
        core_periodic(name="core-poll", **now)(periodic_tasks.poll)
        yield broker


def kept(alias: str) -> list[str]:
    """The names of the schedules ``manage.py threadmill --backend ALIAS worker`` keeps."""
    options = task_backends[alias].options_checked
    settings = worker_settings(options, parse_worker_args(options, [])[0])
    assert settings.kept_schedules is not None
    return sorted(settings.kept_schedules())


def stored(broker: Broker) -> list[str]:
    return sorted(
        record.task_path
        for queue in ("default", "high")
        for record in broker.backend.peek(queue, TaskResultStatus.READY)
    )


def test_each_aliases_worker_keeps_its_own_schedules(bench: Bench, emails: Broker) -> None:
    """A worker of an alias keeps the schedules of that alias's tasks only; a schedule
    declared with threadmill_core's @periodic is the default alias's."""
    assert kept("emails") == ["emails-digest"]
    assert kept("default") == ["core-poll", "dj-add"]
    for alias, broker in (("default", bench.broker), ("emails", emails)):
        settings = worker_settings(
            task_backends[alias].options_checked,
            parse_worker_args(task_backends[alias].options_checked, [])[0],
        )
        assert settings.kept_schedules is not None
        Scheduler(broker.backend, settings.kept_schedules().values()).run_pass(bench.clock.now())
    assert stored(emails) == ["tests.django.djapp.tasks:send_digest"]
    assert stored(bench.broker) == [
        "tests.core.periodic_tasks:poll",
        "tests.django.djapp.tasks:add",
    ]


def test_the_schedules_command_of_an_alias_lists_and_steers_its_own_only(
    bench: Bench, emails: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    """manage.py threadmill [--backend A] schedules lists A's schedules; pausing or running
    another alias's is refused (exit 3), and nothing is stored in A's broker."""
    call_command("threadmill", "--backend", "emails", "schedules", "--json")
    assert [row["name"] for row in json.loads(capsys.readouterr().out)] == ["emails-digest"]
    call_command("threadmill", "schedules", "--json")
    listed = [row["name"] for row in json.loads(capsys.readouterr().out)]
    assert listed == ["core-poll", "dj-add"]
    for action in ("pause", "resume", "run"):
        with pytest.raises(SystemExit) as exited:
            call_command("threadmill", "schedules", action, "emails-digest")
        assert exited.value.code == 3
        assert "no schedule 'emails-digest' in TASKS['default'] (it is TASKS['emails']'s" in (
            capsys.readouterr().err
        )
    assert bench.broker.backend.schedule_pauses() == {}
    assert stored(bench.broker) == []
    call_command("threadmill", "--backend", "emails", "schedules", "run", "emails-digest")
    assert stored(emails) == ["tests.django.djapp.tasks:send_digest"]


def test_a_schedule_name_is_one_aliass_only(emails: Broker) -> None:
    """The same schedule declared for a second alias under one name is refused."""
    again = task(backend="default")(tasks.send_digest)
    with pytest.raises(InvalidSchedule, match=r"two schedules are named 'emails-digest' \(of "):
        periodic(every=timedelta(minutes=5), catch_up=timedelta(0), name="emails-digest")(again)
    assert kept("emails") == ["emails-digest"]
