"""TaskBackend's side of Django's API: enqueue, results, refusals, settings, checks, brokers."""

from __future__ import annotations

import asyncio
import socket
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.tasks import TaskResultStatus as Status
from django.tasks import task, task_backends
from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
from django.test import override_settings

from tests.django.bench import Bench
from tests.django.djapp import tasks
from threadmill_core import ExponentialBackoff, InvalidCall, UnsupportedValue
from threadmill_core.errors import BackendUnavailable
from threadmill_django import Task, TaskBackend, UnknownTask, UnsupportedArgument
from threadmill_django import task as threadmill_task
from threadmill_django.brokers import broker_for


def threadmill(options: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"BACKEND": "threadmill_django.TaskBackend", "OPTIONS": options, **more}


def test_enqueue_returns_the_stored_result(bench: Bench) -> None:
    """The result is READY, of this task, with the arguments; get_result reads the same."""
    result = tasks.echo.enqueue(1, [2, 3], key={"a": None})
    assert isinstance(task_backends["default"], TaskBackend)
    assert result.status == Status.READY
    assert result.task == tasks.echo
    assert (result.args, result.kwargs) == ([1, [2, 3]], {"key": {"a": None}})
    assert result.backend == "default"
    assert result.enqueued_at is not None
    assert result.enqueued_at.tzinfo is not None
    assert tasks.echo.get_result(result.id) == result
    assert bench.broker.get_result(result.id).args == [1, [2, 3]]


def test_aenqueue_and_aget_result(bench: Bench) -> None:
    """The async forms store and read the same way."""

    async def both() -> tuple[Any, Any]:
        result = await tasks.add.aenqueue(1, 2)
        return result, await tasks.add.aget_result(result.id)

    enqueued, read = asyncio.run(both())
    assert read == enqueued
    assert bench.broker.get_result(read.id).args == [1, 2]


def test_djangos_normalisation_comes_first(bench: Bench) -> None:
    """A tuple becomes a list and bytes text, as Django normalises them, before our codec."""
    result = tasks.echo.enqueue((1, 2), b"text")
    assert bench.broker.get_result(result.id).args == [[1, 2], "text"]


@pytest.mark.parametrize(
    ("args", "kwargs", "where", "kind"),
    [
        ((datetime.now(UTC),), {}, "args[0]", UnsupportedArgument),
        ((), {"when": {1, 2}}, "kwargs['when']", UnsupportedArgument),
        ((), {"raw": b"\xff"}, "kwargs['raw']", UnsupportedArgument),
        (({1: "int key"},), {}, "args[0]", UnsupportedValue),
        ((), {"deep": [[{"ok": 1}, {2: "no"}]]}, "kwargs['deep'][0][1]", UnsupportedValue),
    ],
)
def test_what_either_cannot_carry_is_refused_naming_it(
    bench: Bench, args: tuple[Any, ...], kwargs: dict[str, Any], where: str, kind: type
) -> None:
    """Refused at enqueue with the argument's place in the message, and nothing stored."""
    with pytest.raises(kind) as refused:
        tasks.echo.enqueue(*args, **kwargs)
    assert str(refused.value).startswith(where)
    assert isinstance(refused.value, TypeError)
    assert not bench.broker.counts()


def test_a_refusal_by_django_is_both_type_and_value_error(bench: Bench) -> None:
    """Django raises TypeError or ValueError for what it refuses; ours is both."""
    with pytest.raises(ValueError, match=r"args\[0\]"):
        tasks.echo.enqueue(b"\xff")
    with pytest.raises(TypeError, match="Unsupported type"):
        tasks.echo.enqueue(object())


@pytest.mark.parametrize(
    ("django_task", "args", "kwargs", "reason"),
    [
        (tasks.add, (1, 2, 3), {}, "too many positional arguments"),
        (tasks.add, (1,), {"c": 2}, "missing a required argument: 'b'"),
        (tasks.add, (1, 2), {"c": 3}, "got an unexpected keyword argument 'c'"),
        (tasks.add, (1,), {"a": 2}, "multiple values for argument 'a'"),
        (tasks.flaky, (), {}, "missing a required argument: 'succeed_on'"),
        (
            tasks.flaky,
            (),
            {"context": None, "succeed_on": 1},
            "unexpected keyword argument 'context'",
        ),
    ],
)
@pytest.mark.parametrize("form", ["enqueue", "aenqueue"])
def test_a_call_that_does_not_fit_the_function_is_refused(
    bench: Bench,
    django_task: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    reason: str,
    form: str,
) -> None:
    """A TypeError at enqueue naming the task and the mismatch (a task's context not counted),
    and nothing stored."""

    def enqueue() -> object:
        if form == "enqueue":
            return django_task.enqueue(*args, **kwargs)
        return asyncio.run(django_task.aenqueue(*args, **kwargs))

    with pytest.raises(InvalidCall) as refused:
        enqueue()
    assert isinstance(refused.value, TypeError)
    assert refused.value.task_path == f"tests.django.djapp.tasks:{django_task.name}"
    assert refused.value.index is None
    assert reason in str(refused.value)
    assert not bench.broker.counts()


def test_a_keyword_argument_named_task_is_the_tasks(bench: Bench) -> None:
    """A task's keyword `task` is the task's, not threadmill's Broker.enqueue's."""
    result = tasks.echo.enqueue(task="t")
    bench.work()
    assert tasks.echo.get_result(result.id).return_value == [[], {"task": "t"}]


def test_a_missing_result_does_not_exist(bench: Bench) -> None:
    """Unknown ids raise Django's TaskResultDoesNotExist."""
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result("no-such-id")


def test_a_result_of_a_task_outside_installed_apps_is_not_imported(bench: Bench) -> None:
    """Reading a result imports a task's module only if it belongs to an installed app."""
    from threadmill_core.task import register_task, unregister_task

    path = "threadmill_never_imported.jobs:job"
    made = register_task(tasks.add.func, path=path)
    record = made.using(broker=bench.broker).enqueue(1, 2)
    unregister_task(path)
    with pytest.raises(UnknownTask, match="not a Django task of this process"):
        task_backends["default"].get_result(record.id)


def test_reading_a_result_imports_the_tasks_module_of_an_installed_app(bench: Bench) -> None:
    """A process that never imported a task's module reads its result: the app's module loads."""
    import sys

    from threadmill_core.task import register_task, unregister_task

    module = "tests.django.djapp.late_tasks"
    assert module not in sys.modules
    path = f"{module}:late"
    record = register_task(tasks.echo.func, path=path).using(broker=bench.broker).enqueue(5)
    unregister_task(path)  # as in a process that only reads results
    result = task_backends["default"].get_result(record.id)
    assert module in sys.modules
    assert result.task.func is sys.modules[module].late.func
    assert result.args == [5]


def test_priority_and_queue_are_stored(bench: Bench) -> None:
    """Django's priority and queue_name are threadmill's; a float priority that is whole works."""
    result = tasks.add.using(priority=7.0, queue_name="high").enqueue(1, 2)  # type: ignore[arg-type]
    stored = bench.broker.get_result(result.id)
    assert (stored.priority, stored.queue) == (7, "high")
    assert tasks.add.get_result(result.id).task.priority == 7


def test_a_queue_threadmill_cannot_name_is_invalid(bench: Bench) -> None:
    """Any queue name Django takes must also be one threadmill can store."""
    setting = {"default": threadmill({"url": "memory://"}, QUEUES=[])}
    with override_settings(TASKS=setting), pytest.raises(InvalidTask, match="queue must be"):
        tasks.add.using(queue_name="")


def test_task_options_through_the_task_class(bench: Bench) -> None:
    """On Django 6.1 the plain decorator takes retry and lease_ttl; both versions take ours."""
    import django

    policy = ExponentialBackoff(base_delay=1, max_retries=2)
    made = threadmill_task(retry=policy, lease_ttl=45)(tasks.add.func)
    assert isinstance(made, Task)
    assert (made.retry, made.lease_ttl) == (policy, 45)
    if django.VERSION >= (6, 1):
        plain = task(retry=policy)(tasks.add.func)  # type: ignore[call-overload]
        assert isinstance(plain, Task)
        assert plain.retry == policy
    record = bench.broker.get_result(made.enqueue(1, 2).id)
    assert record.retry is not None
    assert record.retry.path == "threadmill_django.runner:DjangoContextPolicy"


def test_bad_task_options_are_invalid_tasks() -> None:
    """A retry policy no worker could find, or a bad lease_ttl, fails at the decorator."""
    with pytest.raises(InvalidTask, match="module-level function"):
        threadmill_task(retry=lambda context: None)(tasks.add.func)
    with pytest.raises(InvalidTask, match="lease_ttl"):
        threadmill_task(lease_ttl=-1)(tasks.add.func)


def test_threadmill_options_need_a_threadmill_alias() -> None:
    """threadmill_django.task(retry=...) on another backend's alias says why it cannot."""
    immediate = {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}
    with (
        override_settings(TASKS={"default": threadmill({}), "other": immediate}),
        pytest.raises(TypeError, match=r"threadmill_django\.TaskBackend alias"),
    ):
        threadmill_task(backend="other", retry=ExponentialBackoff())(tasks.add.func)


# --- settings, checks and brokers ------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_nothing_connects_before_the_first_use() -> None:
    """Building the backend and decorating tasks open no connection; the first enqueue does."""
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    with override_settings(TASKS={"default": threadmill({"url": url})}):
        backend = task_backends["default"]
        made = task(tasks.add.func)
        assert backend.check() == []
        with pytest.raises(BackendUnavailable):
            made.enqueue(1, 2)


def test_one_broker_per_alias_shared_by_every_thread() -> None:
    """Django makes a backend per thread; they share the alias's broker. Aliases have their own."""
    setting = {"default": threadmill({"url": "memory://"}), "other": threadmill({})}
    with override_settings(TASKS=setting):
        seen: list[Any] = []

        def look() -> None:
            seen.append((task_backends["default"], task_backends["default"].broker))

        threads = [threading.Thread(target=look) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len({id(backend) for backend, _ in seen}) == 3
        assert len({id(broker) for _, broker in seen}) == 1
        assert task_backends["other"].broker is not seen[0][1]


def test_changing_the_tasks_setting_gives_a_new_broker() -> None:
    """override_settings(TASKS=...) closes the brokers; the next use connects anew."""
    with override_settings(TASKS={"default": threadmill({"url": "memory://"})}):
        first = task_backends["default"].broker
    with override_settings(TASKS={"default": threadmill({"url": "memory://"})}):
        assert task_backends["default"].broker is not first


def test_url_defaults_to_threadmill_url(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a url option, THREADMILL_URL, else memory://."""
    monkeypatch.setenv("THREADMILL_URL", "memory://?result_ttl=60")
    with override_settings(TASKS={"default": threadmill({})}):
        assert task_backends["default"].options_checked.url == "memory://?result_ttl=60"
    monkeypatch.delenv("THREADMILL_URL")
    with override_settings(TASKS={"default": threadmill({})}):
        assert task_backends["default"].options_checked.url == "memory://"


def test_result_ttl_travels_in_the_url() -> None:
    """result_ttl is added to the URL's query, which is all a worker process connects with."""
    with override_settings(TASKS={"default": threadmill({"url": "memory://", "result_ttl": 90})}):
        backend = task_backends["default"]
        assert backend.options_checked.broker_url == "memory://?result_ttl=90"
        assert broker_for(backend.options_checked).backend.result_ttl == timedelta(seconds=90)


@pytest.mark.parametrize(
    ("options", "queues", "message"),
    [
        ({"urll": "memory://"}, None, "['OPTIONS']['urll']: unknown option"),
        ({"url": "localhost"}, None, "['OPTIONS']['url'] must be a backend URL"),
        ({"threads": 0}, None, "['OPTIONS']['threads'] must be an int of at least 1"),
        ({"lease_ttl": "30"}, None, "['OPTIONS']['lease_ttl'] must be a timedelta or"),
        ({"result_ttl": -1}, None, "['OPTIONS']['result_ttl'] must be a positive duration"),
        ({"log_level": "LOUD"}, None, "['OPTIONS']['log_level'] must be one of"),
        ({"log_format": "xml"}, None, "['OPTIONS']['log_format'] must be one of"),
        ({"task_modules": "app.jobs"}, None, "['OPTIONS']['task_modules'] must be a list"),
        ({}, ["ok", "bad\nname"], "['QUEUES']: queue must be"),
    ],
)
def test_a_wrong_setting_is_a_check_error_and_refuses_use(
    options: dict[str, Any], queues: list[str] | None, message: str
) -> None:
    """Every wrong option is named by the check and by the error on first use."""
    params = threadmill(options) if queues is None else threadmill(options, QUEUES=queues)
    with override_settings(TASKS={"default": params}):
        backend = task_backends["default"]
        errors = [m for m in backend.check() if m.id == "threadmill_django.E001"]
        assert len(errors) == 1
        assert errors[0].msg.startswith("TASKS['default']")
        assert message in errors[0].msg
        with pytest.raises(InvalidTaskBackend, match=message.replace("[", r"\[")):
            backend.broker  # noqa: B018  # the property raises


def test_an_unknown_scheme_is_a_check_error_naming_the_extra() -> None:
    """A scheme no installed plugin serves is an error; a known one says which extra adds it."""
    with override_settings(TASKS={"default": threadmill({"url": "nosuch://x"})}):
        [error] = task_backends["default"].check()
    assert error.id == "threadmill_django.E002"
    assert "no installed threadmill backend handles nosuch://" in error.msg
    assert "memory://" in error.msg


def test_memory_is_a_check_warning_saying_why() -> None:
    """memory:// cannot be shared with a worker process: the warning says so."""
    with override_settings(TASKS={"default": threadmill({"url": "memory://"})}):
        [warning] = task_backends["default"].check()
    assert warning.id == "threadmill_django.W001"
    assert "invisible to any other" in warning.msg


def test_the_app_must_be_installed() -> None:
    """Without "threadmill_django" in INSTALLED_APPS the check says to add it."""
    from django.apps import apps

    with override_settings(TASKS={"default": threadmill({"url": "memory://"})}):
        apps.set_available_apps(["tests.django.djapp"])
        try:
            ids = [m.id for m in task_backends["default"].check()]
        finally:
            apps.unset_available_apps()
    assert "threadmill_django.E003" in ids
