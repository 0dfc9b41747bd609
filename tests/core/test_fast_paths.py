"""The shortcuts taken once per task give exactly what the general paths give.

`codec.decode_record` reads a well-formed enqueued payload with plain type
checks instead of cattrs; it must agree with cattrs on everything it
accepts, and hand anything else to it, so that bytes the shortcut does not
take decode (or fail, as a `PayloadError`) just as they did before it existed.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from threadmill_core import PayloadError, TaskResult
from threadmill_core.codec import converter, decode_record, encode_enqueued, encode_record
from threadmill_core.ids import new_task_id
from threadmill_core.models import TaskContext, with_call
from threadmill_core.testing import strategies as ts

records = st.builds(
    TaskResult,
    id=st.builds(new_task_id),
    task_path=ts.task_paths(),
    args=ts.task_args(),
    kwargs=ts.task_kwargs(),
    queue=ts.queue_names(),
    priority=ts.priorities(),
    retry=ts.retry_specs(),
)


def slow_decode(data: bytes) -> TaskResult:
    """The general path: json, then cattrs, any failure a `PayloadError`."""
    try:
        return converter.structure(json.loads(data), TaskResult)  # type: ignore[no-any-return]  # cattrs returns Any here
    except Exception as exc:
        raise PayloadError(str(exc)) from exc


@given(records)
def test_an_enqueued_payload_decodes_as_cattrs_decodes_it(record: TaskResult) -> None:
    payload = encode_enqueued(record)
    fast = decode_record(payload)
    # Compared encoded, so that a nan in the arguments compares equal to itself.
    assert encode_record(fast) == encode_record(slow_decode(payload)) == encode_record(record)


def payload(**changes: Any) -> bytes:
    fields = json.loads(encode_enqueued(TaskResult(id="t1", task_path="app:f")))
    fields.update(changes)
    return json.dumps(fields).encode()


@pytest.mark.parametrize(
    "data",
    [
        payload(priority=101),
        payload(priority="1"),
        payload(priority=True),
        payload(args={"a": 1}),
        payload(kwargs=[]),
        payload(queue=None),
        payload(id=7),
        payload(retry={"path": 1, "options": None}),
        payload(retry={"path": "m:p"}),
        payload(retry={"path": "m:p", "options": [1]}),
        payload(surprise=1),
        b'{"id": "t1"',
        b"\xff\xfe",
    ],
)
def test_a_payload_the_fast_path_does_not_take_decodes_as_before(data: bytes) -> None:
    try:
        expected = slow_decode(data)
    except PayloadError:
        with pytest.raises(PayloadError, match="not a valid TaskResult"):
            decode_record(data)
    else:
        assert decode_record(data) == expected


def test_json_with_padding_or_full_records_still_decodes() -> None:
    record = TaskResult(id="t1", task_path="app:f", args=[1], queue="q", priority=-3)
    assert decode_record(b"  " + encode_enqueued(record) + b"\n") == record
    retried = TaskResult(id="t2", task_path="app:f", retry=None, attempts=2)
    full = json.dumps(converter.unstructure(retried)).encode()
    assert decode_record(full) == retried


def test_a_context_learns_its_lease_was_lost_once_and_for_good() -> None:
    context = TaskContext(record=TaskResult(id="t1", task_path="app:f"), attempt=1)
    other = TaskContext(record=context.record, attempt=1)
    assert not context.lease_lost
    context.mark_lease_lost()
    assert context.lease_lost
    assert not other.lease_lost
    assert context == other  # the flag is not part of the value


@given(records, st.builds(new_task_id), ts.task_args(), ts.task_kwargs())
def test_a_call_copy_is_the_record_evolve_makes(
    record: TaskResult, task_id: str, args: list[Any], kwargs: dict[str, Any]
) -> None:
    record = attrs.evolve(record, attempts=2, worker_ids=("w",))  # state fields are copied too
    before = encode_record(record)
    copy = with_call(record, task_id, args, kwargs)
    expected = attrs.evolve(record, id=task_id, args=args, kwargs=kwargs)
    assert type(copy) is TaskResult
    assert encode_record(copy) == encode_record(expected)  # encoded: nan equals itself
    assert list(vars(copy)) == [field.name for field in attrs.fields(TaskResult)]
    assert copy.args is args  # the call's own, not a copy
    assert copy.kwargs is kwargs
    assert encode_record(record) == before  # the record copied from is as it was
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        copy.id = "changed"  # type: ignore[misc]  # the point: it is frozen
