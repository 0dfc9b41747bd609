"""`CheckedRecords`: a batch checked whole when made, its records made as a backend reads them."""

from __future__ import annotations

from typing import Any

import pytest

from threadmill_core import backend as backend_module
from threadmill_core.backend import CheckedRecords
from threadmill_core.codec import check_record, check_retry
from threadmill_core.errors import UnsupportedValue
from threadmill_core.models import RetryPolicySpec, TaskResult, copy_call

SHARED = TaskResult(
    id="",
    task_path="app:work",
    queue="q",
    priority=4,
    retry=RetryPolicySpec(path="app:policy", options={"tries": 3}),
)


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the records made so far, in the order they were made."""
    ids: list[str] = []

    def counted(shared: TaskResult, changes: dict[str, Any]) -> TaskResult:
        ids.append(changes["id"])
        return copy_call(shared, changes)

    monkeypatch.setattr(backend_module, "copy_call", counted)
    return ids


def test_each_record_is_the_shared_one_with_its_calls_id_and_arguments() -> None:
    """Record i is `shared` with ids[i] and call i's arguments, as a list and a dict."""
    batch = CheckedRecords(SHARED, ["a", "b"], [((1, "x"), {"k": [2]}), ([], {})])
    assert len(batch) == 2
    assert list(batch) == [
        TaskResult(
            id="a",
            task_path="app:work",
            args=[1, "x"],
            kwargs={"k": [2]},
            queue="q",
            priority=4,
            retry=SHARED.retry,
        ),
        TaskResult(id="b", task_path="app:work", queue="q", priority=4, retry=SHARED.retry),
    ]
    for record in batch:  # what a backend's own checks would say of them
        check_record(record)
        check_retry(record.retry)


def test_records_are_made_when_first_read_and_the_same_objects_after(made: list[str]) -> None:
    """Nothing is made up front; a part read makes what it needs, and reads again make nothing."""
    batch = CheckedRecords(SHARED, [f"t{n}" for n in range(6)], [((n,), {}) for n in range(6)])
    assert made == []
    first = batch[0:2]
    assert [r.id for r in first] == ["t0", "t1"]
    assert made == ["t0", "t1"]
    assert batch[1] is first[1]
    assert made == ["t0", "t1"]
    assert batch[3].args == [3]
    assert made == ["t0", "t1", "t2", "t3"]
    assert batch[-1].id == "t5"
    assert batch[2:4] == [batch[2], batch[3]]
    assert [r.id for r in batch[::-2]] == ["t5", "t3", "t1"]
    assert [r.id for r in batch] == made == [f"t{n}" for n in range(6)]
    with pytest.raises(IndexError):
        batch[6]
    with pytest.raises(IndexError):
        batch[-7]


def test_the_callers_arguments_are_copied(made: list[str]) -> None:
    """Later changes to what the caller passed do not reach the records."""
    args, kwargs = [1], {"k": 1}
    batch = CheckedRecords(SHARED, ["a"], [(args, kwargs)])
    args.append(2)
    kwargs["k"] = 2
    assert (batch[0].args, batch[0].kwargs) == ([1], {"k": 1})


@pytest.mark.parametrize(
    ("calls", "named"),
    [
        ([((1,), {}), (({1},), {})], r"args\[0\]"),
        ([((1,), {}), ((), {"when": {1}})], r"kwargs\['when'\]"),
        ([((), {1: "int key"})], r"kwargs\[1\]"),
    ],
)
def test_a_bad_call_anywhere_is_refused_when_made(
    made: list[str], calls: list[tuple[Any, Any]], named: str
) -> None:
    with pytest.raises(UnsupportedValue, match=named):
        CheckedRecords(SHARED, [f"t{n}" for n in range(len(calls))], calls)
    assert made == []


@pytest.mark.parametrize(
    ("shared", "ids", "named"),
    [
        (SHARED, ["a", 5], "id"),
        (SHARED, ["a", "\ud800"], "id"),
        (TaskResult(id="", task_path="app:work", queue=5), ["a"], "queue"),  # type: ignore[arg-type]
        (TaskResult(id="", task_path="app:work", retry=RetryPolicySpec(path=5)), ["a"], "retry"),  # type: ignore[arg-type]
    ],
)
def test_a_bad_id_or_shared_field_is_refused_when_made(
    shared: TaskResult, ids: list[Any], named: str
) -> None:
    """As `check_record` and `check_retry` would refuse each record, naming the field."""
    with pytest.raises(UnsupportedValue, match=named):
        CheckedRecords(shared, ids, [((), {})] * len(ids))


def test_ids_and_calls_must_pair_up() -> None:
    with pytest.raises(ValueError, match="2 ids for 1 calls"):
        CheckedRecords(SHARED, ["a", "b"], [((), {})])
