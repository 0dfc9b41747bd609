"""Calls that could never run are refused at enqueue, and options nobody knows are named."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.core import registered_tasks as defs
from tests.core import tasks
from threadmill_core import (
    Broker,
    ExponentialBackoff,
    InvalidCall,
    InvalidOption,
    InvalidTaskDefinition,
    TaskContext,
    Worker,
)
from threadmill_core.task import register_task, unregister_task

# tasks.add is add(a, b); each call below is what calling it directly would refuse.
MISFITS = [
    pytest.param((1, 2, 3), {}, "too many positional arguments", id="too-many-positional"),
    pytest.param((1, 2), {"c": 3}, "got an unexpected keyword argument 'c'", id="unknown-kw"),
    pytest.param((1,), {}, "missing a required argument: 'b'", id="missing"),
    pytest.param((1,), {"a": 2}, "multiple values for argument 'a'", id="given-twice"),
]


@pytest.fixture
def cleanup() -> Iterator[list[str]]:
    """Paths a test registers, unregistered afterwards."""
    paths: list[str] = []
    yield paths
    for path in paths:
        unregister_task(path)


def enqueue_through_task(broker: Broker, *args: Any, **kwargs: Any) -> object:
    return tasks.add.using(broker=broker).enqueue(*args, **kwargs)


def enqueue_through_broker(broker: Broker, *args: Any, **kwargs: Any) -> object:
    return broker.enqueue(tasks.add, *args, **kwargs)


def enqueue_through_batch(broker: Broker, *args: Any, **kwargs: Any) -> object:
    return broker.enqueue_many(tasks.add, [(args, kwargs)])


@pytest.mark.parametrize(
    "enqueue", [enqueue_through_task, enqueue_through_broker, enqueue_through_batch]
)
@pytest.mark.parametrize(("args", "kwargs", "reason"), MISFITS)
def test_a_call_that_does_not_fit_the_signature_is_refused(
    broker: Broker,
    enqueue: Callable[..., object],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    reason: str,
) -> None:
    """InvalidCall (a TypeError) names the task, its signature and inspect's mismatch, and
    nothing is stored."""
    with pytest.raises(InvalidCall) as refused:
        enqueue(broker, *args, **kwargs)
    assert isinstance(refused.value, TypeError)
    assert refused.value.task_path == "tests.core.tasks:add"
    assert refused.value.signature == "(a: 'int', b: 'int')"
    assert reason in refused.value.reason
    assert "tests.core.tasks:add(a: 'int', b: 'int') does not fit" in str(refused.value)
    assert reason in str(refused.value)
    assert not broker.counts()


def test_a_bad_call_in_a_batch_refuses_the_batch_naming_its_index(broker: Broker) -> None:
    """One misfit in enqueue_many stores none of the batch; the error gives the call's index."""
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [((1, 2), {}), ((3,), {"b": 4})]
    calls.append(((5,), {}))
    with pytest.raises(InvalidCall, match=r"call 2 of the batch of task tests\.core\.tasks:add"):
        broker.enqueue_many(tasks.add, [*calls, ((6, 7), {})])
    assert not broker.counts()


def test_a_task_that_takes_a_context_binds_the_callers_arguments_only(broker: Broker) -> None:
    """flaky(context, fail_times): callers pass fail_times and never the context."""
    flaky = tasks.flaky.using(broker=broker)
    flaky.enqueue(0)
    flaky.enqueue(fail_times=0)
    with pytest.raises(InvalidCall, match="missing a required argument: 'fail_times'"):
        flaky.enqueue()
    with pytest.raises(InvalidCall, match="too many positional arguments"):
        flaky.enqueue(None, 0)
    with pytest.raises(InvalidCall, match="unexpected keyword argument 'context'"):
        flaky.enqueue(context=None, fail_times=0)
    assert broker.counts()["default"].ready == 2


def test_the_signature_is_read_once_per_task() -> None:
    """Copies made by using() keep the task's signature, without the context parameter."""
    assert str(tasks.flaky.signature) == "(fail_times: 'int') -> 'str'"
    assert tasks.flaky.using(priority=3).signature is tasks.flaky.signature


def test_keywords_named_like_enqueues_own_parameters_belong_to_the_task(broker: Broker) -> None:
    """A task's keyword arguments may be named task or self, through Task and Broker alike."""
    first = tasks.takes_anything.using(broker=broker).enqueue(self=1, task=2)
    second = broker.enqueue(tasks.takes_anything, 3, self=4, task=5)
    Worker(broker).run(burst=True)
    assert broker.get_result(first.id).return_value == [[], {"self": 1, "task": 2}]
    assert broker.get_result(second.id).return_value == [[3], {"self": 4, "task": 5}]


def test_a_wrapper_is_bound_to_the_signature_it_is_registered_with(
    broker: Broker, cleanup: list[str]
) -> None:
    """register_task(signature=...) checks calls of a ``*args, **kwargs`` wrapper as the
    function it wraps would."""
    path = "tests.core.registered_tasks:wrapped_plain"
    cleanup.append(path)
    made = register_task(
        defs.Wrapper([]), path=path, takes_context=True, signature=tasks.add.signature
    )
    made.using(broker=broker).enqueue(1, b=2)
    with pytest.raises(InvalidCall, match="missing a required argument: 'b'") as refused:
        made.using(broker=broker).enqueue(1)
    assert (refused.value.task_path, refused.value.signature) == (path, "(a: 'int', b: 'int')")
    assert broker.counts()["default"].ready == 1


def test_a_context_task_without_a_positional_parameter_is_refused(cleanup: list[str]) -> None:
    """A task that takes a context needs a positional first parameter to receive it."""

    def keyword_only(*, context: TaskContext) -> None: ...

    path = "tests.core.registered_tasks:keyword_only"
    cleanup.append(path)
    with pytest.raises(InvalidTaskDefinition, match="first parameter must be positional"):
        register_task(keyword_only, path=path)


def using_with_an_unknown_option() -> object:
    return tasks.add.using(prio=3)  # type: ignore[arg-type]  # an unknown option, on purpose


def register_with_an_unknown_option() -> object:
    path = "tests.core.registered_tasks:never_registered"
    return register_task(defs.plain, path=path, prio=3)  # type: ignore[arg-type]  # on purpose


def backoff_with_an_unknown_option() -> object:
    return ExponentialBackoff(prio=3)  # type: ignore[arg-type]  # an unknown option, on purpose


@pytest.mark.parametrize(
    ("make", "valid"),
    [
        (using_with_an_unknown_option, "broker, queue, priority, run_after, time_limit"),
        (
            register_with_an_unknown_option,
            "path, queue, priority, retry, lease_ttl, time_limit, takes_context, signature",
        ),
        (
            backoff_with_an_unknown_option,
            "base_delay, max_delay, factor, max_retries, jitter, retry_on",
        ),
    ],
)
def test_an_unknown_option_is_refused_listing_the_valid_ones(
    make: Callable[[], object], valid: str
) -> None:
    """using(), register_task() and ExponentialBackoff() say InvalidOption, as @task does, not
    a bare TypeError."""
    with pytest.raises(InvalidOption, match=f"unknown .*option\\(s\\) prio; valid: {valid}$"):
        make()


def test_a_call_is_refused_after_calls_of_other_shapes_fitted(broker: Broker) -> None:
    """Calls that fit are remembered by shape only: each misfit is refused however many calls
    of other shapes, or of its own, came before, in one batch or one by one."""
    add = tasks.add.using(broker=broker)
    add.enqueue(1, 2)
    add.enqueue(a=1, b=2)
    add.enqueue(1, b=2)
    for _ in range(2):
        with pytest.raises(InvalidCall, match="multiple values for argument 'a'"):
            add.enqueue(1, a=2)
        with pytest.raises(InvalidCall, match="too many positional arguments"):
            add.enqueue(1, 2, 3)
        with pytest.raises(InvalidCall, match="missing a required argument: 'a'"):
            add.enqueue(b=2)
    with pytest.raises(InvalidCall, match="call 3 of the batch") as refused:
        broker.enqueue_many(tasks.add, [((1, 2), {}), ((3, 4), {}), ((5,), {"b": 6}), ((7,), {})])
    assert "missing a required argument: 'b'" in refused.value.reason
    assert sum(counts.ready for counts in broker.counts().values()) == 3
