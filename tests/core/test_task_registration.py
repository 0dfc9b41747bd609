"""`register_task` and `unregister_task`: tasks defined without @task, as integrations do."""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from tests.core import registered_tasks as defs
from threadmill_core import (
    Broker,
    ExponentialBackoff,
    InvalidOption,
    InvalidTaskDefinition,
    TaskResultStatus,
    Worker,
)
from threadmill_core.task import (
    register_task,
    registered_task,
    registered_tasks,
    unregister_task,
    validate_task_path,
)
from threadmill_memory import MemoryBackend

NEVER_IMPORTED = "tests.core.never_imported_by_registration"


@pytest.fixture
def broker() -> Iterator[Broker]:
    with Broker(MemoryBackend()) as made:
        yield made


@pytest.fixture
def cleanup() -> Iterator[list[str]]:
    """Paths a test registers, unregistered afterwards so tests do not see each other's."""
    paths: list[str] = []
    yield paths
    for path in paths:
        unregister_task(path)


def drain(broker: Broker) -> None:
    Worker(broker, queues=["default", "other"]).run(burst=True)


def test_a_wrapper_runs_under_the_path_it_was_registered_with(
    broker: Broker, cleanup: list[str]
) -> None:
    """A callable object registered under a path is what a worker runs for records naming it."""
    seen: list[Any] = []
    path = f"{NEVER_IMPORTED}:job"
    cleanup.append(path)
    made = register_task(defs.Wrapper(seen), path=path, takes_context=True)
    assert registered_task(path) is made
    record = made.using(broker=broker).enqueue(2, 3)
    drain(broker)
    assert broker.get_result(record.id).return_value == 5
    assert seen == [(1, True, (2, 3), {})]
    # The path named a module that does not exist; nothing tried to import it.
    assert NEVER_IMPORTED not in sys.modules


def test_a_partial_can_be_a_task(broker: Broker, cleanup: list[str]) -> None:
    """Any callable works with an explicit path; without a signature to read, no context."""
    path = "tests.core.registered_tasks:partial_of_plain"
    cleanup.append(path)
    made = register_task(functools.partial(defs.plain, 40), path=path)
    assert made.takes_context is False
    record = made.using(broker=broker).enqueue(2)
    drain(broker)
    assert broker.get_result(record.id).return_value == 42


def test_path_defaults_to_the_functions_own(broker: Broker, cleanup: list[str]) -> None:
    """Without a path, a module-level function is named module:qualname, as @task names it."""
    cleanup.append("tests.core.registered_tasks:with_context")
    made = register_task(defs.with_context, queue="other", priority=5)
    assert made.path == "tests.core.registered_tasks:with_context"
    assert (made.queue, made.priority, made.takes_context) == ("other", 5, True)
    record = made.using(broker=broker).enqueue(4)
    assert record.queue == "other"
    drain(broker)
    assert broker.get_result(record.id).return_value == 41


class _Text(str):
    """A str subclass, as a framework's lazy or enum names are."""


def test_a_path_given_as_a_str_subclass_is_stored_as_its_text(
    broker: Broker, cleanup: list[str]
) -> None:
    """An explicit path of a str subclass is kept as a plain str, so its calls enqueue."""
    cleanup.append("tests.core.registered_tasks:as_text")
    made = register_task(defs.plain, path=_Text("tests.core.registered_tasks:as_text"))
    assert type(made.path) is str
    record = made.using(broker=broker).enqueue(1, 2)
    assert (type(record.task_path), record.task_path) == (str, made.path)


def test_registering_a_path_again_replaces_the_task(broker: Broker, cleanup: list[str]) -> None:
    """The latest registration of a path is the one a worker runs."""
    path = "tests.core.registered_tasks:replaced"
    cleanup.append(path)
    first = register_task(functools.partial(defs.plain, 1), path=path)
    register_task(functools.partial(defs.plain, 100), path=path)
    record = first.using(broker=broker).enqueue(1)  # the old object still enqueues the path
    drain(broker)
    assert broker.get_result(record.id).return_value == 101


def test_an_unregistered_path_is_not_run(broker: Broker) -> None:
    """After unregister_task, a worker runs nothing for records naming the path: it gives
    them back uncharged, for a worker that has it."""
    seen: list[Any] = []
    path = "tests.core.registered_tasks:gone"
    made = register_task(defs.Wrapper(seen), path=path, takes_context=True)
    assert unregister_task(path) is made
    assert unregister_task(path) is None
    assert path not in registered_tasks()
    record = made.using(broker=broker).enqueue(1)
    drain(broker)
    back = broker.get_result(record.id)
    assert (back.status, back.attempts, back.errors) == (TaskResultStatus.DEFERRED, 0, ())
    assert seen == []


def test_the_retry_policy_decides_failures(broker: Broker, cleanup: list[str]) -> None:
    """Options are @task's: a registered task's retry policy is stored and used."""
    path = "tests.core.registered_tasks:fails"
    cleanup.append(path)
    policy = ExponentialBackoff(base_delay=0, max_retries=2, jitter=0)
    made = register_task(functools.partial(defs.plain, "x"), path=path, retry=policy)
    record = made.using(broker=broker).enqueue(1)  # "x" + 1 raises TypeError
    assert record.retry is not None
    drain(broker)
    final = broker.get_result(record.id)
    assert final.status is TaskResultStatus.FAILED
    assert final.attempts == 3
    assert [e.exception_class_path for e in final.errors] == ["builtins.TypeError"] * 3


@pytest.mark.parametrize(
    "path",
    ["", "module", "module:", ":name", "a b:c", "mod:1name", "mod:<lambda>", "mod::x", 7, None],
)
def test_a_malformed_path_is_refused(path: object) -> None:
    """An explicit path must read module:qualname; anything else names itself in the error."""
    with pytest.raises(InvalidTaskDefinition, match="module:qualname"):
        validate_task_path(path)
    if path is not None:
        with pytest.raises(InvalidTaskDefinition, match="module:qualname"):
            register_task(defs.plain, path=path)  # type: ignore[arg-type]


def test_well_formed_paths_pass() -> None:
    """Dotted identifiers on both sides, unicode letters included, are paths."""
    for path in ("m:f", "pkg.mod:Class.method", "_p.m2:f_3", "paquet.modül:tâche"):
        assert validate_task_path(path) == path


def test_without_a_path_a_callable_object_is_refused() -> None:
    """Only module-level functions name themselves; anything else needs a path."""
    with pytest.raises(InvalidTaskDefinition):
        register_task(defs.Wrapper([]))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"priority": 101}, "priority"),
        ({"queue": ""}, "queue"),
        ({"lease_ttl": 0}, "lease_ttl"),
        ({"lease_ttl": float("nan")}, "lease_ttl"),
        ({"lease_ttl": timedelta(days=400_000)}, "lease_ttl"),
        ({"retry": lambda context: None}, "module-level"),
    ],
)
def test_bad_options_are_refused_and_nothing_is_registered(
    options: dict[str, Any], message: str
) -> None:
    """Options are checked as @task checks them, before anything is registered."""
    path = "tests.core.registered_tasks:refused"
    with pytest.raises(InvalidOption, match=message):
        register_task(defs.plain, path=path, **options)
    assert registered_task(path) is None
