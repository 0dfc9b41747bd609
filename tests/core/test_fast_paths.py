"""The shortcuts a worker takes once per task give exactly what the slow, general paths give.

`codec.decode_record` reads an enqueued payload without cattrs, and
`evolve_unchecked` copies a record without its validators; both must agree
with the general path on everything they accept, and hand anything else to
it, so that bytes the fast path does not take decode (or fail, as a
`PayloadError`) just as they did before it existed.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from threadmill_core import PayloadError, TaskResult, TaskResultStatus
from threadmill_core.codec import converter, decode_record, encode_enqueued, encode_record
from threadmill_core.models import Lease, TaskContext, copier, evolve_unchecked, new_task_id
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
        return converter.structure(json.loads(data), TaskResult)  # type: ignore[no-any-return]
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


@given(records, st.sampled_from(TaskResultStatus), st.integers(0, 5), st.integers())
def test_evolve_unchecked_copies_as_attrs_evolve_does(
    record: TaskResult, status: TaskResultStatus, attempts: int, value: int
) -> None:
    changes = {"status": status, "attempts": attempts, "return_value": value}
    copied = evolve_unchecked(record, **changes)
    assert type(copied) is TaskResult
    assert copied is not record
    assert encode_record(copied) == encode_record(attrs.evolve(record, **changes))
    assert encode_record(evolve_unchecked(record)) == encode_record(record)


def test_evolve_unchecked_works_for_any_model_and_leaves_the_original_alone() -> None:
    record = TaskResult(id="t1", task_path="app:f")
    lease = Lease(token="1", deadline=record_time(), record=record)
    later = evolve_unchecked(lease, deadline=record_time() + timedelta(seconds=5))
    assert later.deadline - lease.deadline == timedelta(seconds=5)
    assert (later.token, later.record) == (lease.token, lease.record)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        later.token = "2"  # type: ignore[misc]


def record_time() -> Any:
    from threadmill_core.clock import from_ms

    return from_ms(1_700_000_000_000)


def test_a_context_learns_its_lease_was_lost_once_and_for_good() -> None:
    context = TaskContext(record=TaskResult(id="t1", task_path="app:f"), attempt=1)
    other = TaskContext(record=context.record, attempt=1)
    assert not context.lease_lost
    context.mark_lease_lost()
    assert context.lease_lost
    assert not other.lease_lost
    assert context == other  # the flag is not part of the value


@attrs.frozen(slots=False)
class Unslotted:
    a: int
    b: int = 2


def test_evolve_unchecked_copies_a_class_without_slots_too() -> None:
    assert evolve_unchecked(Unslotted(1), a=3) == Unslotted(3, 2)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        evolve_unchecked(Unslotted(1)).a = 5  # type: ignore[misc]


def test_a_misspelled_field_is_refused_not_ignored() -> None:
    """As `attrs.evolve` does: a change to a field the class lacks raises, naming it."""
    record = TaskResult(id="t1", task_path="app:f")
    with pytest.raises(TypeError, match=r"TaskResult has no field.* staus"):
        evolve_unchecked(record, staus=TaskResultStatus.FAILED)
    with pytest.raises(TypeError, match="staus"):
        copier(TaskResult, ["status", "staus"])


def test_a_copier_replaces_exactly_the_fields_it_was_made_for() -> None:
    record = TaskResult(id="t1", task_path="app:f", priority=3)
    copy = copier(TaskResult, ("id", "args"))
    assert copier(TaskResult, ("id", "args")) is copy  # made once
    first = copy(record, {"id": "t2", "args": [1]})
    second = copy(record, {"id": "t3", "args": [2], "priority": 9})  # not its field: kept
    assert (first.id, first.args, first.priority) == ("t2", [1], 3)
    assert (second.id, second.args, second.priority) == ("t3", [2], 3)
    with pytest.raises(KeyError, match="args"):
        copy(record, {"id": "t4"})
