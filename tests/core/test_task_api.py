"""The @task decorator, Task.using and Task.enqueue, including every refusal at the door."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

import attrs
import pytest

from tests.core import tasks
from threadmill_core import (
    Broker,
    FakeClock,
    InvalidOption,
    InvalidTaskDefinition,
    TaskContext,
    TaskResultStatus,
    UnsupportedValue,
    task,
)
from threadmill_core.task import register_task, registered_tasks, unregister_task


def nothing_stored(broker: Broker) -> bool:
    return not broker.counts()


def test_decorated_function_still_calls_the_plain_function() -> None:
    """Calling a task runs the function in place, enqueueing nothing."""
    assert tasks.add(2, 3) == 5
    assert tasks.add.path == "tests.core.tasks:add"


def test_decorator_registers_the_task_by_path() -> None:
    """Decorating a module-level function registers it under module:qualname."""
    assert registered_tasks()["tests.core.tasks:echo"] is tasks.echo


def test_lambda_is_refused() -> None:
    """A lambda cannot be found by import path, so it is refused with a clear error."""
    with pytest.raises(InvalidTaskDefinition, match="lambda"):
        task(lambda: None)


def test_nested_function_is_refused() -> None:
    """A function defined inside another cannot be imported by path, so it is refused."""

    def inner() -> None: ...

    with pytest.raises(InvalidTaskDefinition, match="module-level"):
        task(inner)


def test_main_module_function_is_refused() -> None:
    """A function in __main__ cannot be imported by a worker process, so it is refused."""

    def script_function() -> None: ...

    script_function.__module__ = "__main__"
    script_function.__qualname__ = "script_function"
    with pytest.raises(InvalidTaskDefinition, match="__main__"):
        task(script_function)


def test_non_function_is_refused() -> None:
    """@task decorates functions only; a class instance is refused."""
    with pytest.raises(InvalidTaskDefinition):
        task(print)  # type: ignore[arg-type]  # a builtin, refused on purpose


@attrs.frozen
class FixedDelay:
    """A retry policy whose field is a timedelta, which the codec does not carry."""

    delay: timedelta

    def __call__(self, context: TaskContext) -> timedelta | None:
        return self.delay


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"queues": "x"}, "unknown task option"),
        ({"priority": 101}, "priority"),
        ({"priority": -101}, "priority"),
        ({"priority": 1.5}, "priority"),
        ({"priority": True}, "priority"),
        ({"queue": ""}, "queue"),
        ({"lease_ttl": 0}, "lease_ttl"),
        ({"lease_ttl": "10"}, "lease_ttl"),
        ({"lease_ttl": float("nan")}, "lease_ttl"),
        ({"lease_ttl": float("inf")}, "lease_ttl"),
        ({"lease_ttl": 1e20}, "lease_ttl"),
        ({"lease_ttl": timedelta(days=400_000)}, "lease_ttl"),
        ({"retry": lambda ctx: None}, "retry policy"),
        ({"retry": FixedDelay(timedelta(seconds=5))}, r"retry.options\['delay'\] is a datetime"),
    ],
)
def test_bad_task_options_are_refused(options: dict[str, Any], message: str) -> None:
    """Unknown options and out-of-range values raise InvalidOption naming the problem."""
    with pytest.raises(InvalidOption, match=message):
        task(**options)


def test_using_returns_a_changed_copy(broker: Broker) -> None:
    """using() changes the copy only; the original keeps its options."""
    changed = tasks.add.using(broker=broker, queue="fast", priority=-3)
    assert (changed.queue, changed.priority, changed.broker) == ("fast", -3, broker)
    assert (tasks.add.queue, tasks.add.priority, tasks.add.broker) == ("other", 5, None)
    # Each copy's calls are stored with its own options, not the original's.
    record = changed.enqueue(1, 2)
    assert (record.queue, record.priority, record.task_path) == ("fast", -3, tasks.add.path)
    assert (tasks.add.template.queue, tasks.add.template.priority) == ("other", 5)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"priority": 1000}, "priority"),
        ({"queue": 7}, "queue"),
        ({"run_after": datetime(2030, 1, 1)}, "aware"),
        ({"run_after": "tomorrow"}, "run_after"),
        ({"run_after": timedelta(seconds=-1)}, "run_after"),
        ({"run_after": timedelta(days=400_000)}, "run_after"),
        ({"run_after": timedelta.max}, "run_after"),
        ({"broker": "memory://"}, "broker must be a threadmill_core.Broker"),
    ],
)
def test_bad_using_options_are_refused(options: dict[str, Any], message: str) -> None:
    """using() validates like the decorator: bad values raise InvalidOption."""
    with pytest.raises(InvalidOption, match=message):
        tasks.add.using(**options)


class Queues(StrEnum):
    EMAILS = "emails"


def test_a_str_enum_queue_is_stored_as_its_text(broker: Broker) -> None:
    """A queue given as a str subclass (a StrEnum member) is kept as a plain str."""
    path = "tests.core.tasks:echo_in_an_enum_queue"
    registered = register_task(tasks.echo.func, path=path, queue=Queues.EMAILS)
    try:
        for made in (registered, tasks.echo.using(queue=Queues.EMAILS)):
            assert type(made.queue) is str
            record = made.using(broker=broker).enqueue(1)
            assert (type(record.queue), record.queue) == (str, "emails")
    finally:
        unregister_task(path)


def test_enqueue_stores_the_call(broker: Broker, clock: FakeClock) -> None:
    """enqueue stores a READY record with the arguments, queue and priority, and returns it."""
    record = tasks.add.using(broker=broker).enqueue(1, b=2**70)
    assert record.status is TaskResultStatus.READY
    assert (record.task_path, record.args, record.kwargs) == (
        "tests.core.tasks:add",
        [1],
        {"b": 2**70},
    )
    assert (record.queue, record.priority, record.attempts) == ("other", 5, 0)
    assert record.enqueued_at == clock.now()
    assert broker.get_result(record.id) == record


def test_enqueue_with_unsupported_argument_stores_nothing(broker: Broker) -> None:
    """An argument the codec cannot carry is refused by path and nothing is stored."""
    with pytest.raises(UnsupportedValue) as info:
        tasks.echo.using(broker=broker).enqueue(value={"at": datetime.now(UTC)})
    assert info.value.path == "kwargs['value']['at']"
    assert nothing_stored(broker)


def test_enqueue_many_checks_every_call_before_storing_any(broker: Broker) -> None:
    """One bad call in a batch refuses the whole batch."""
    with pytest.raises(UnsupportedValue, match=r"args\[0\]"):
        broker.enqueue_many(tasks.echo, [((1,), {}), (({1},), {})])
    assert nothing_stored(broker)


def test_relative_run_after_is_measured_on_the_backend_clock(
    broker: Broker, clock: FakeClock
) -> None:
    """A timedelta run_after defers from the backend's now, not the client's."""
    record = tasks.echo.using(broker=broker, run_after=timedelta(minutes=5)).enqueue(1)
    assert record.status is TaskResultStatus.DEFERRED
    assert record.run_after == clock.now() + timedelta(minutes=5)


def test_absolute_run_after_is_kept_and_rounded_up_to_the_millisecond(
    broker: Broker, clock: FakeClock
) -> None:
    """An aware run_after is stored as given, rounded up to whole milliseconds."""
    when = clock.now() + timedelta(hours=1, microseconds=1500)
    record = tasks.echo.using(broker=broker, run_after=when).enqueue(1)
    assert record.run_after == clock.now() + timedelta(hours=1, milliseconds=2)


def test_a_run_after_that_rounds_past_datetime_max_is_refused(broker: Broker) -> None:
    """An absolute run_after whose round-up leaves datetime's range is an InvalidOption."""
    last = datetime.max.replace(tzinfo=UTC)
    with pytest.raises(InvalidOption, match="run_after"):
        tasks.echo.using(broker=broker, run_after=last).enqueue(1)
    assert nothing_stored(broker)


def test_past_run_after_is_ready_at_once(broker: Broker, clock: FakeClock) -> None:
    """A run_after already passed makes the task READY."""
    record = tasks.echo.using(broker=broker, run_after=clock.now() - timedelta(days=1)).enqueue(1)
    assert record.status is TaskResultStatus.READY


def test_ids_are_time_ordered(broker: Broker) -> None:
    """Task ids sort in enqueue order and have the UUIDv7 layout."""
    import uuid

    ids = [tasks.echo.using(broker=broker).enqueue(i).id for i in range(200)]
    assert ids == sorted(ids)
    assert {uuid.UUID(i).version for i in ids} == {7}
