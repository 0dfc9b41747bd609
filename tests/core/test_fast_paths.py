"""The shortcuts taken once per task give exactly what the general paths give.

`models.evolved` copies a record with some fields changed, validating only
those; it must make what `attrs.evolve` makes and refuse what it refuses.

`codec.decode_record` reads a well-formed enqueued payload with plain type
checks instead of cattrs; it must agree with cattrs on everything it
accepts, and hand anything else to it, so that bytes the shortcut does not
take decode (or fail, as a `PayloadError`) just as they did before it existed.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, timedelta
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from threadmill_core import InvalidOption, PayloadError, TaskResult
from threadmill_core.codec import converter, decode_record, encode_enqueued, encode_record
from threadmill_core.context import TaskContext
from threadmill_core.ids import new_task_id
from threadmill_core.models import TaskResultStatus, evolved
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
    headers=st.sampled_from([{}, {"traceparent": "00-abc-def-01"}]),
    time_limit=st.none() | st.integers(1, 10**12).map(lambda ms: timedelta(milliseconds=ms)),
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
        payload(headers=None),
        payload(args=None),
        payload(time_limit=10**20),  # more than a timedelta holds
        b'{"id": "t1"}',
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


#: Changes a backend or the worker makes to a record: of a call, of its state, of its outcome.
aware = st.datetimes(timezones=st.just(UTC))
changes = st.fixed_dictionaries(
    {},
    optional={
        "id": st.builds(new_task_id),
        "args": ts.task_args(),
        "kwargs": ts.task_kwargs(),
        "status": st.sampled_from(TaskResultStatus),
        "priority": st.integers(-150, 150),
        "enqueued_at": aware,
        "started_at": st.one_of(st.none(), aware, st.datetimes()),  # naive: refused
        "finished_at": st.one_of(st.none(), aware),
        "attempts": st.integers(0, 5),
        "worker_ids": st.lists(st.text(max_size=4), max_size=3).map(tuple),
        "return_value": st.integers(),
    },
)


@given(records, changes)
def test_an_evolved_record_is_the_one_attrs_evolve_makes(
    record: TaskResult, changes: dict[str, Any]
) -> None:
    record = attrs.evolve(record, attempts=2, worker_ids=("w",))  # state fields are copied too
    before = encode_record(record)
    try:
        expected = attrs.evolve(record, **changes)
    except (ValueError, InvalidOption) as refused:
        with pytest.raises(type(refused), match=re.escape(str(refused))):
            evolved(record, **changes)
        return
    copy = evolved(record, **changes)
    assert type(copy) is TaskResult
    assert encode_record(copy) == encode_record(expected)  # encoded: nan equals itself
    assert list(vars(copy)) == [field.name for field in attrs.fields(TaskResult)]
    for name, value in changes.items():
        assert getattr(copy, name) is value  # the caller's own, not a copy
    assert encode_record(record) == before  # the record copied from is as it was
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        copy.id = "changed"  # type: ignore[misc]  # the point: it is frozen


def test_an_evolved_record_refuses_a_field_it_does_not_have() -> None:
    with pytest.raises(TypeError, match="no field 'colour'"):
        evolved(TaskResult(id="t1", task_path="app:f"), colour="red")
