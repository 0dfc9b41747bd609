"""Nesting depth: what enqueue accepts, every backend stores and a worker reads back; the rest is
refused at the door with the limit named."""

from __future__ import annotations

from typing import Any

import pytest

from tests.core import tasks
from threadmill_core import Broker, TaskResultStatus, UnsupportedValue, Worker
from threadmill_core.testing import Harness
from threadmill_core.values import MAX_DEPTH


def nested(depth: int) -> Any:
    """`depth` levels of alternating lists and dicts around a string."""
    value: Any = "bottom"
    for level in range(depth):
        value = [value] if level % 2 else {"level": value}
    return value


def run_all(broker: Broker) -> None:
    Worker(broker, poll_interval=0.01).run(burst=True)


def test_a_value_at_the_limit_round_trips(harness: Harness) -> None:
    """A value nesting MAX_DEPTH deep, as an argument and as a keyword argument, is run by a
    worker and its return value read back unchanged, on every backend."""
    broker = Broker(harness.backend)
    value = nested(MAX_DEPTH)
    by_position = tasks.echo.using(broker=broker).enqueue(value)
    by_name = tasks.echo.using(broker=broker).enqueue(value=value)
    run_all(broker)
    for record in (by_position, by_name):
        final = broker.get_result(record.id)
        assert final.status is TaskResultStatus.SUCCESSFUL, final.errors
        assert final.return_value == value
        assert [*final.args, *final.kwargs.values()] == [value]


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 990, 5_000])
def test_a_value_past_the_limit_is_refused_at_enqueue(harness: Harness, depth: int) -> None:
    """One level past MAX_DEPTH (or far past it) is an UnsupportedValue naming the argument and
    the limit, never a RecursionError, and nothing is stored, on every backend."""
    broker = Broker(harness.backend)
    echo = tasks.echo.using(broker=broker)
    for enqueue, path in (
        (lambda: echo.enqueue(nested(depth)), "args[0]"),
        (lambda: echo.enqueue(value=nested(depth)), "kwargs['value']"),
        (lambda: broker.enqueue_many(echo, [((1,), {}), ((nested(depth),), {})]), "args[0]"),
    ):
        with pytest.raises(UnsupportedValue) as refused:
            enqueue()
        assert refused.value.path == path
        assert f"more than {MAX_DEPTH} deep" in str(refused.value)
    assert broker.counts() == {}


def test_a_value_that_holds_itself_is_refused(harness: Harness) -> None:
    """A list that holds itself is refused as nesting without end, on every backend."""
    broker = Broker(harness.backend)
    looped: list[Any] = []
    looped.append(looped)
    with pytest.raises(UnsupportedValue, match="holds itself"):
        tasks.echo.using(broker=broker).enqueue(looped)
    assert broker.counts() == {}


def test_a_return_value_past_the_limit_fails_the_task(harness: Harness) -> None:
    """A task returning a value one level past MAX_DEPTH ends FAILED with an error saying so,
    and the stored record still reads back, on every backend."""
    broker = Broker(harness.backend)
    record = tasks.takes_anything.using(broker=broker).enqueue(nested(MAX_DEPTH))
    run_all(broker)  # returns [args[0]]: one level more than its argument
    final = broker.get_result(record.id)
    assert final.status is TaskResultStatus.FAILED
    assert final.errors[-1].exception_class_path == "threadmill_core.errors.UnsupportedValue"
    assert f"the return value nests lists and dicts more than {MAX_DEPTH} deep" in (
        final.errors[-1].message
    )
