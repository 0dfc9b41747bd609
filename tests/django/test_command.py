"""``manage.py threadmill``: the threadmill CLI on an alias's broker, and the worker's settings."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.tasks import task_backends
from django.test import override_settings

from tests.django.bench import Bench
from tests.django.djapp import tasks
from threadmill_core import cli
from threadmill_django.worker import (
    MAPPED,
    discover_task_modules,
    parse_worker_args,
    prepare_process,
    worker_settings,
)


def manage(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """`manage.py threadmill ARGV`: exit code, stdout, stderr."""
    try:
        call_command("threadmill", *argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def threadmill(
    capsys: pytest.CaptureFixture[str], bench: Bench, *argv: str
) -> tuple[int, str, str]:
    """`threadmill ARGV` on the same broker: exit code, stdout, stderr."""
    code = cli.main(list(argv), broker=bench.broker)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def filled(bench: Bench) -> dict[str, str]:
    """A few tasks in each state the inspecting commands show."""
    done = tasks.add.enqueue(1, 2)
    failed = tasks.always_fails.enqueue()
    bench.work()
    bench.clock.advance(timedelta(seconds=5))
    bench.work()
    waiting = tasks.add.using(priority=3).enqueue(5, 5)
    return {"done": done.id, "failed": failed.id, "waiting": waiting.id}


@pytest.mark.parametrize(
    "argv",
    [
        ("stats",),
        ("stats", "--json"),
        ("workers",),
        ("workers", "--json"),
        ("ls", "default", "--status", "ready"),
        ("ls", "default", "--status", "failed", "--json"),
        ("show", "{failed}"),
        ("show", "{done}", "--json"),
        ("show", "no-such-task"),
        ("purge", "default", "--status", "cancelled", "--yes", "--json"),
    ],
)
def test_reading_commands_print_what_threadmill_prints(
    capsys: pytest.CaptureFixture[str], bench: Bench, filled: dict[str, str], argv: tuple[str, ...]
) -> None:
    """Same stdout, stderr and exit code as the threadmill command on the same broker."""
    argv = tuple(part.format(**filled) for part in argv)
    ours = manage(capsys, *argv)
    theirs = threadmill(capsys, bench, *argv)
    assert ours == theirs
    assert ours[1] or ours[2]  # it printed something


def test_actions_steer_the_aliases_broker_with_threadmills_exit_codes(
    capsys: pytest.CaptureFixture[str], bench: Bench, filled: dict[str, str]
) -> None:
    """cancel and requeue act on the alias's tasks; partial refusals exit 1, total ones 3."""
    code, out, _err = manage(capsys, "cancel", filled["waiting"], filled["done"], "--json")
    report = json.loads(out)
    assert code == 1
    assert (len(report["done"]), len(report["refused"]), report["exit_code"]) == (1, 1, 1)
    assert (
        tasks.add.get_result(filled["waiting"])
        .errors[-1]
        .exception_class_path.endswith("TaskCancelled")
    )
    code, out, _err = manage(capsys, "requeue", "--failed", "default")
    assert code == 0
    # Only the FAILED segment: the cancelled task reads FAILED in Django, CANCELLED here.
    assert "requeued 1 of 1 FAILED in queue 'default'" in out
    assert manage(capsys, "cancel", filled["done"])[0] == 3


def test_the_broker_is_the_aliases(capsys: pytest.CaptureFixture[str], bench: Bench) -> None:
    """--broker is refused: the alias chooses the broker."""
    with pytest.raises(CommandError, match="choose it with --backend") as refused:
        call_command("threadmill", "stats", "--broker", "memory://")
    assert refused.value.returncode == 2


def test_another_backends_alias_is_refused() -> None:
    """Only threadmill_django aliases have threadmill's commands."""
    immediate = {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}
    with (
        override_settings(TASKS={"default": immediate}),
        pytest.raises(CommandError, match=r"not a threadmill_django\.TaskBackend"),
    ):
        call_command("threadmill", "stats")
    with pytest.raises(CommandError, match="doesn't exist"):
        call_command("threadmill", "--backend", "nosuch", "stats")


def test_the_worker_refuses_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker process cannot share memory://, so the worker command says so."""
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "tests.django.unused_settings")
    with pytest.raises(CommandError, match="memory:// lives inside one process"):
        call_command("threadmill", "worker", "--burst")


def test_the_worker_needs_a_settings_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spawned processes set Django up from DJANGO_SETTINGS_MODULE; without it, no worker."""
    monkeypatch.delenv("DJANGO_SETTINGS_MODULE", raising=False)
    with pytest.raises(CommandError, match="DJANGO_SETTINGS_MODULE, which is not set"):
        call_command("threadmill", "worker", "--burst")


def test_an_unknown_log_format_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """--log-format xml: the worker command refuses it in one line naming the formats, code 2."""
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "tests.django.unused_settings")
    params = {
        "BACKEND": "threadmill_django.TaskBackend",
        "OPTIONS": {"url": "redis://127.0.0.1:1/0"},
    }
    with (
        override_settings(TASKS={"default": params}),
        pytest.raises(
            CommandError, match="unknown log format 'xml': --log-format takes text or json"
        ) as refused,
    ):
        call_command("threadmill", "worker", "--burst", "--log-format", "xml")
    assert refused.value.returncode == 2


# --- the worker's command line -----------------------------------------------------------


def options(**given: Any) -> Any:
    params = {
        "BACKEND": "threadmill_django.TaskBackend",
        "QUEUES": ["high", "default"],
        "OPTIONS": {"url": "redis://127.0.0.1:1/0", **given},
    }
    with override_settings(TASKS={"default": params}):
        return task_backends["default"].options_checked


def test_worker_defaults_come_from_the_alias() -> None:
    """QUEUES and the worker OPTIONS become threadmill worker's defaults."""
    alias = options(threads=3, processes=2, lease_ttl=timedelta(seconds=45), result_ttl=600,
                    max_tasks=100, log_level="WARNING", log_format="json",
                    connect_timeout=5)  # fmt: skip
    args, modules = parse_worker_args(alias, [])
    settings = worker_settings(alias, args)
    assert settings.queues == ("high", "default")
    assert (settings.threads, settings.processes, settings.max_tasks) == (3, 2, 100)
    assert settings.lease_ttl == timedelta(seconds=45)
    assert settings.connect_timeout == timedelta(seconds=5)
    assert (settings.log_level, settings.log_format) == ("WARNING", "json")
    assert settings.broker_url == "redis://127.0.0.1:1/0?result_ttl=600"
    assert "tests.django.djapp.tasks" in modules
    assert settings.modules == tuple(modules)


def test_the_command_line_wins_over_the_alias() -> None:
    """Flags given to the worker override the alias's defaults."""
    alias = options(threads=3, task_modules=["tests.django.test_command"])
    args, modules = parse_worker_args(
        alias, ["--threads", "8", "-Q", "low", "--burst", "--tasks-module", "tests.django.bench"]
    )
    settings = worker_settings(alias, args)
    assert (settings.threads, settings.queues, settings.burst) == (8, ("low",), True)
    assert modules == [
        "tests.django.djapp.tasks",
        "tests.django.test_command",
        "tests.django.bench",
    ]


def test_the_metrics_port_comes_from_the_alias_or_the_command_line() -> None:
    """OPTIONS ``metrics_port`` and ``metrics_host`` serve the worker's metrics; the flags win."""
    alias = options(metrics_port=9100, metrics_host="0.0.0.0")
    settings = worker_settings(alias, parse_worker_args(alias, [])[0])
    assert (settings.metrics_port, settings.metrics_host) == (9100, "0.0.0.0")
    args, _modules = parse_worker_args(alias, ["--metrics-port", "9200"])
    assert worker_settings(alias, args).metrics_port == 9200
    assert worker_settings(options(), parse_worker_args(options(), [])[0]).metrics_port is None


def test_every_worker_option_reaches_the_supervisor() -> None:
    """Each option of `threadmill worker` is mapped: a new one fails here until it is."""
    args, _modules = parse_worker_args(options(), [])
    assert set(vars(args)) - {"command", "handler"} == MAPPED


def test_bad_worker_flags_exit_as_threadmill_worker_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The worker's flags are checked by threadmill's own parser."""
    with pytest.raises(SystemExit) as exited:
        parse_worker_args(options(), ["--threads", "0"])
    assert exited.value.code == 2
    assert "argument --threads/-t: must be 1 or more" in capsys.readouterr().err


def test_the_apps_tasks_modules_are_found_without_importing_them() -> None:
    """Autodiscovery: each installed app's tasks module, in INSTALLED_APPS order."""
    assert discover_task_modules() == ["tests.django.djapp.tasks"]


def test_the_process_setup_is_picklable_and_names_the_alias() -> None:
    """Worker processes are spawned: the setup must travel, and sets the alias served."""
    import pickle

    from threadmill_django import runner

    settings = worker_settings(options(), parse_worker_args(options(), [])[0])
    assert settings.setup is not None
    setup = pickle.loads(pickle.dumps(settings.setup))
    assert setup.func is prepare_process
    assert setup.args == ("default",)
    runner._serving.clear()
