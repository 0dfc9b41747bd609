"""`Backend.enqueue_calls`: what `enqueue` of the calls' records would do, on every backend."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from threadmill_core.backend import TaskCall, call_record
from threadmill_core.checks import check_calls, check_records
from threadmill_core.errors import UnsupportedValue
from threadmill_core.models import RetryPolicySpec, TaskResult, TaskResultStatus
from threadmill_core.testing import Harness

TEMPLATE = TaskResult(
    id="",
    task_path="app.tasks:work",
    queue="mail",
    priority=7,
    retry=RetryPolicySpec(path="app.tasks:policy", options={"tries": 3}),
)

#: The fields a caller gives; the backend owns the others.
GIVEN = ("id", "task_path", "args", "kwargs", "queue", "priority", "run_after", "retry")


def calls(*ids: str) -> list[TaskCall]:
    return [(task_id, [n, "x"], {"n": n}) for n, task_id in enumerate(ids)]


def given(record: TaskResult) -> dict[str, Any]:
    return {name: getattr(record, name) for name in GIVEN}


def test_each_call_is_stored_as_its_record_would_be(harness: Harness) -> None:
    """The stored records are the calls' records as enqueue stores them, in READY in order."""
    backend = harness.backend
    sent = calls("a", "b", "c")
    stored = backend.enqueue_calls(TEMPLATE, sent)
    assert [given(record) for record in stored] == [
        given(call_record(TEMPLATE, call)) for call in sent
    ]
    assert all(record.status is TaskResultStatus.READY for record in stored)
    assert [backend.get(record.id) for record in stored] == stored
    peeked = backend.peek("mail", TaskResultStatus.READY)
    assert [record.id for record in peeked] == ["a", "b", "c"]


def test_calls_due_later_are_deferred(harness: Harness) -> None:
    """A template's run_after in the future defers every call, as enqueue defers records."""
    backend = harness.backend
    later = TaskResult(
        id="",
        task_path="app.tasks:work",
        run_after=datetime(2999, 1, 1, tzinfo=UTC),
    )
    stored = backend.enqueue_calls(later, calls("x", "y"))
    assert {record.status for record in stored} == {TaskResultStatus.DEFERRED}
    assert [backend.get(record.id) for record in stored] == stored


def test_a_stored_id_answers_with_its_record_and_the_first_of_a_repeated_id_wins(
    harness: Harness,
) -> None:
    """Idempotent on id, across calls and within one, exactly as enqueue is."""
    backend = harness.backend
    [first] = backend.enqueue_calls(TEMPLATE, [("a", [1], {})])
    again = backend.enqueue_calls(TEMPLATE, [("a", [2], {}), ("b", [3], {}), ("b", [4], {})])
    assert again[0] == first
    assert again[1] == again[2]
    assert again[1].args == [3]
    assert backend.counts()["mail"].ready == 2


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (("late", [datetime(2020, 1, 1, tzinfo=UTC)], {}), "args[0]"),
        (("late", [], {"when": timedelta(1)}), "kwargs['when']"),
        (("late", (1,), {}), "args"),
        (("late", [], [("a", 1)]), "kwargs"),
        ((5, [], {}), "id"),
    ],
    ids=["datetime-arg", "timedelta-kwarg", "tuple-args", "list-kwargs", "int-id"],
)
def test_a_bad_call_anywhere_stores_nothing(harness: Harness, call: Any, field: str) -> None:
    """A call the codec cannot carry is refused naming it, before any call is stored."""
    backend = harness.backend
    with pytest.raises(UnsupportedValue, match=re.escape(field)):
        backend.enqueue_calls(TEMPLATE, [*calls("a", "b"), call])
    assert backend.counts() == {}


@pytest.mark.parametrize(
    "call",
    [
        ("ok", [1], {}),
        ("late", [datetime(2020, 1, 1, tzinfo=UTC)], {}),
        ("late", (1,), {}),
        ("late", [], [("a", 1)]),
        (5, [], {}),
        ("é", [], {}),
    ],
)
@pytest.mark.parametrize(
    "template",
    [
        TEMPLATE,
        TaskResult(id="", task_path="app.tasks:work", retry=RetryPolicySpec(path=5)),  # type: ignore[arg-type]  # a path that is not a str, on purpose
        TaskResult(id="", task_path="app.tasks:work", queue=7),  # type: ignore[arg-type]  # a queue that is not a str, on purpose
    ],
    ids=["good", "int-retry-path", "int-queue"],
)
def test_check_calls_refuses_what_check_records_refuses(template: TaskResult, call: Any) -> None:
    """The shared check of calls says what the check of their records says, word for word."""

    def outcome(check: Any) -> str | None:
        try:
            check()
        except UnsupportedValue as exc:
            return str(exc)
        return None

    assert outcome(lambda: check_calls(template, [call])) == outcome(
        lambda: check_records([call_record(template, call)])
    )
