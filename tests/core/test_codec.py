"""The codec carries values unchanged and refuses, by path, what it cannot carry."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from enum import IntEnum
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from threadmill_core import PayloadError, TaskError, TaskResult, TaskResultStatus, UnsupportedValue
from threadmill_core.backend import call_record
from threadmill_core.codec import (
    STATE_FIELDS,
    check_arguments,
    decode_record,
    decode_value,
    encode_calls,
    encode_enqueued,
    encode_record,
    encode_value,
)
from threadmill_core.ids import new_task_id
from threadmill_core.models import Progress, RetryPolicySpec, TaskCall
from threadmill_core.testing import strategies as ts

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def same(a: Any, b: Any) -> bool:
    """Equal, with float identity (so -0.0 != 0.0) and exact types (so 1 != 1.0 != True)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return math.copysign(1, a) == math.copysign(1, b) and (a == b or (a != a and b != b))
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


@given(json_values)
def test_values_round_trip_value_for_value(value: Any) -> None:
    """Any codec-carriable value decodes to the same value, types, float bits and key order."""
    assert same(decode_value(encode_value(value)), value)


@pytest.mark.parametrize(
    "value",
    [[], {}, 2**63 + 1, -(2**200), 0.1, math.pi, -0.0, math.inf, -math.inf, math.nan,
     "naïve ✓ 😀", {"z": 1, "a": 2, "m": [{}, []]}, True, None],
)  # fmt: skip
def test_edge_values_round_trip(value: Any) -> None:
    """Edge values that JSON libraries commonly mangle come back unchanged."""
    assert same(decode_value(encode_value(value)), value)


class Color(IntEnum):
    RED = 1


@pytest.mark.parametrize(
    ("args", "kwargs", "path"),
    [
        ((), {"when": datetime(2030, 1, 1, tzinfo=UTC)}, "kwargs['when']"),
        (({1, 2},), {}, "args[0]"),
        (([1, (2, 3)],), {}, "args[0][1]"),
        ((), {"d": {1: "one"}}, "kwargs['d'][1]"),
        ((Color.RED,), {}, "args[0]"),
        ((object(),), {}, "args[0]"),
        ((b"bytes",), {}, "args[0]"),
    ],
)
def test_unsupported_values_are_named_by_path(
    args: tuple[Any, ...], kwargs: dict[str, Any], path: str
) -> None:
    """A value the codec would change is refused with an error naming where it sits."""
    with pytest.raises(UnsupportedValue) as info:
        check_arguments(args, kwargs)
    assert info.value.path == path
    assert str(info.value).startswith(path)


def test_a_value_that_holds_itself_is_refused_by_name() -> None:
    """A list that contains itself is an `UnsupportedValue` naming the argument, not a
    RecursionError (the encoder, which is given only checked values, does not look for cycles)."""
    looped: list[Any] = [1]
    looped.append(looped)
    with pytest.raises(UnsupportedValue) as info:
        check_arguments((0, looped), {})
    assert info.value.path == "args[1]"
    assert "holds itself" in str(info.value)


def test_record_round_trips_with_every_field() -> None:
    """A fully populated record encodes and decodes to an equal record."""
    moment = datetime(2030, 5, 6, 7, 8, 9, 123000, tzinfo=UTC)
    record = TaskResult(
        id=new_task_id(),
        task_path="pkg.mod:func",
        args=[1, [2.5]],
        kwargs={"k": {"n": None}},
        queue="q",
        priority=-7,
        status=TaskResultStatus.FAILED,
        enqueued_at=moment,
        run_after=moment,
        started_at=moment,
        last_attempted_at=moment,
        finished_at=moment,
        attempts=3,
        errors=(
            TaskError(exception_class_path="builtins.KeyError", message="'x'", traceback="tb"),
        ),
        worker_ids=("w1", "w2", "w3"),
        return_value=None,
        retry=RetryPolicySpec(path="m:f", options={"a": [1]}),
    )
    assert decode_record(encode_record(record)) == record


def test_an_enqueued_record_keeps_only_what_the_producer_gave() -> None:
    """encode_enqueued leaves out STATE_FIELDS, which decode to their defaults."""
    moment = datetime(2030, 5, 6, 7, 8, 9, 123000, tzinfo=UTC)
    given = TaskResult(
        id=new_task_id(),
        task_path="pkg.mod:func",
        args=[1, [2.5]],
        kwargs={"k": {"n": None}},
        queue="q",
        priority=-7,
        retry=RetryPolicySpec(path="m:f", options={"a": [1]}),
    )
    sent = attrs.evolve(
        given,
        status=TaskResultStatus.FAILED,
        enqueued_at=moment,
        run_after=moment,
        finished_at=moment,
        attempts=3,
        errors=(TaskError(exception_class_path="builtins.KeyError", message="'x'"),),
        worker_ids=("w1",),
        return_value="junk",
    )
    data = encode_enqueued(sent)
    assert decode_record(data) == given
    assert not STATE_FIELDS & set(json.loads(data))
    assert len(data) < len(encode_record(given))


@given(
    template=st.builds(
        TaskResult,
        id=st.just(""),
        task_path=ts.task_paths(),
        queue=ts.queue_names(),
        priority=ts.priorities(),
        retry=ts.retry_specs(),
    ),
    calls=st.lists(st.tuples(st.builds(new_task_id), ts.task_args(), ts.task_kwargs()), max_size=4),
)
def test_the_payloads_of_many_calls_are_those_of_their_records(
    template: TaskResult, calls: list[TaskCall]
) -> None:
    """encode_calls writes, call by call, the bytes encode_enqueued writes for its record."""
    assert encode_calls(template, calls) == [
        encode_enqueued(call_record(template, call)) for call in calls
    ]


@pytest.mark.parametrize(
    "data",
    [b"", b"not json", b"[]", b'{"id": 1}', b'{"id": "x", "task_path": "m:f", "status": "LOST"}'],
)
def test_foreign_bytes_are_a_payload_error(data: bytes) -> None:
    """Bytes that are not a record raise PayloadError, never a bare decoding error."""
    with pytest.raises(PayloadError):
        decode_record(data)


def test_fields_given_to_decode_are_set_on_the_record_and_checked() -> None:
    """decode_record(data, **fields) equals the decoded record evolved with fields, either path."""
    moment = datetime(2030, 5, 6, 7, 8, 9, 123000, tzinfo=UTC)
    record = TaskResult(id=new_task_id(), task_path="pkg.mod:func", args=[1], priority=3)
    state = {
        "status": TaskResultStatus.RUNNING,
        "enqueued_at": moment,
        "started_at": moment,
        "attempts": 2,
        "worker_ids": ("w1", "w2"),
    }
    for data in (encode_enqueued(record), encode_record(record)):  # fast path, then cattrs
        assert decode_record(data, **state) == attrs.evolve(decode_record(data), **state)
        with pytest.raises(ValueError, match="naive"):
            decode_record(data, started_at=datetime(2030, 5, 6))


#: Every field a backend keeps beside an `encode_enqueued` payload, as it passes them to decode.
STATE = {
    "status": TaskResultStatus.RUNNING,
    "enqueued_at": datetime(2030, 5, 6, 7, 8, 9, 123000, tzinfo=UTC),
    "run_after": None,
    "started_at": datetime(2030, 5, 6, 7, 8, 10, tzinfo=UTC),
    "last_attempted_at": datetime(2030, 5, 6, 7, 8, 11, tzinfo=UTC),
    "finished_at": None,
    "attempts": 2,
    "errors": (TaskError(exception_class_path="x.E", message="m"),),
    "worker_ids": ("w1", "w2"),
    "return_value": None,
}


@given(
    st.builds(
        TaskResult,
        id=st.text(),
        task_path=st.text(),
        args=st.lists(json_values, max_size=3),
        kwargs=st.dictionaries(st.text(), json_values, max_size=3),
        queue=st.text(),
        priority=st.integers(min_value=-100, max_value=100),
        retry=st.none()
        | st.builds(
            RetryPolicySpec,
            path=st.text(),
            options=st.none() | st.dictionaries(st.text(), json_values, max_size=2),
        ),
    )
)
def test_a_payload_decoded_with_the_state_is_the_record_with_the_state(record: TaskResult) -> None:
    """What a claim decodes, from either payload: the record as enqueued, with the stored state."""
    expected = attrs.evolve(record, **STATE)
    for data in (encode_enqueued(record), encode_record(record)):
        assert decode_record(data, **STATE) == expected


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"priority": 101}, "priority must be an int"),
        ({"args": "ab"}, r"\$\.args"),  # not the args ["a", "b"]
        ({"kwargs": []}, r"\$\.kwargs"),
        ({"id": 5}, r"\$\.id"),  # not the id "5"
        ({"priority": True}, r"\$\.priority"),
        ({"retry": {"path": 5, "options": None}}, r"\$\.retry\.path"),
    ],
)
def test_a_payload_of_the_right_keys_but_the_wrong_types_is_refused(
    change: dict[str, Any], named: str
) -> None:
    """A payload of the right keys but a value of another type is refused, named, not converted.

    A worker would otherwise run the task with what cattrs made of it.
    """
    raw = json.loads(encode_enqueued(TaskResult(id="t", task_path="m:f")))
    data = json.dumps({**raw, **change}).encode()
    with pytest.raises(PayloadError, match=named):
        decode_record(data, **STATE)
    with pytest.raises(PayloadError):
        decode_record(b"not json", **STATE)


# --- time limits, progress and cancel requests -----------------------------------------


def test_a_payload_leaves_out_every_key_at_its_default() -> None:
    """A plain task's payload is its task path and id; a key appears once it is not default."""
    assert encode_enqueued(TaskResult(id="t", task_path="m:f")) == b'{"task_path":"m:f","id":"t"}'
    record = TaskResult(
        id="t",
        task_path="m:f",
        args=[1],
        kwargs={"k": 2},
        queue="q",
        priority=-3,
        retry=RetryPolicySpec(path="m:r", options=None),
        headers={"h": "v"},
        time_limit=timedelta(seconds=1),
    )
    assert list(json.loads(encode_enqueued(record))) == [
        "task_path",
        "queue",
        "priority",
        "retry",
        "headers",
        "time_limit",
        "id",
        "args",
        "kwargs",
    ]
    assert decode_record(encode_enqueued(record)) == record


def test_a_payload_stored_with_every_key_decodes_as_it_did() -> None:
    """What earlier releases wrote, every key present, is read on the fast path to the same
    record (`test_fast_paths` holds the converter, their reader, to the new form)."""
    stored = (
        b'{"task_path":"m:f","queue":"default","priority":0,"retry":null,'
        b'"id":"t","args":[1],"kwargs":{}}'
    )
    assert decode_record(stored) == TaskResult(id="t", task_path="m:f", args=[1])


def test_a_record_without_the_new_fields_has_none_of_their_keys() -> None:
    """No time_limit, progress or cancel request: none of their keys, in either payload."""
    record = TaskResult(id="t", task_path="m:f", args=[1])
    assert encode_enqueued(record) == b'{"task_path":"m:f","id":"t","args":[1]}'
    full = json.loads(encode_record(record))
    assert not {"time_limit", "progress", "cancel_requested_at", "headers"} & set(full)


@pytest.mark.parametrize(
    ("limit", "stored_ms"),
    [
        (timedelta(seconds=5), 5000),
        (timedelta(microseconds=1500), 2),
        (timedelta(days=2), 172800000),
    ],
)
@pytest.mark.parametrize("headers", [{}, {"traceparent": "x"}])
def test_a_time_limit_is_stored_as_whole_milliseconds_rounded_up(
    limit: timedelta, stored_ms: int, headers: dict[str, str]
) -> None:
    """time_limit travels in the payload as positive integer ms, with or without headers, and
    every path (fast, converter, many calls) reads it back the same."""
    record = TaskResult(id="t", task_path="m:f", time_limit=limit, headers=headers)
    back = attrs.evolve(record, time_limit=timedelta(milliseconds=stored_ms))
    data = encode_enqueued(record)
    assert json.loads(data)["time_limit"] == stored_ms
    assert decode_record(data) == back
    assert decode_record(encode_record(record)) == back
    calls: list[TaskCall] = [("a", [1], {}), ("b", [], {"k": 2})]
    assert encode_calls(record, calls) == [
        encode_enqueued(call_record(record, call)) for call in calls
    ]
    assert call_record(record, calls[0]).time_limit == limit


@pytest.mark.parametrize("stored", [0, -5, 1.5, "5", True, [1]])
def test_a_stored_time_limit_that_is_not_positive_whole_milliseconds_is_refused(
    stored: object,
) -> None:
    raw = json.loads(encode_enqueued(TaskResult(id="t", task_path="m:f")))
    with pytest.raises(PayloadError, match="time_limit"):
        decode_record(json.dumps({**raw, "time_limit": stored}).encode())


def test_a_time_limit_must_be_a_positive_timedelta() -> None:
    for bad in (timedelta(0), timedelta(seconds=-1), 5):
        with pytest.raises(ValueError, match="time_limit"):
            TaskResult(id="t", task_path="m:f", time_limit=bad)  # type: ignore[arg-type]


def test_progress_and_a_cancel_request_are_backend_state() -> None:
    """They round trip in a full record, and encode_enqueued leaves them out (STATE_FIELDS)."""
    moment = datetime(2030, 5, 6, 7, 8, 9, 123000, tzinfo=UTC)
    progress = Progress(done=2.5, total=10, message="ünï 🚀", updated_at=moment)
    record = TaskResult(id="t", task_path="m:f", progress=progress, cancel_requested_at=moment)
    assert {"progress", "cancel_requested_at"} <= STATE_FIELDS
    assert decode_record(encode_record(record)) == record
    assert decode_record(encode_enqueued(record)) == TaskResult(id="t", task_path="m:f")
    assert decode_record(encode_enqueued(record), progress=progress) == attrs.evolve(
        record, cancel_requested_at=None
    )


@pytest.mark.parametrize(
    "stored",
    [
        {"done": 3, "total": 2, "message": None, "updated_at": None},
        {"done": True, "total": None, "message": None, "updated_at": None},
        {"done": 1, "total": None, "message": 5, "updated_at": None},
        {"done": 1, "total": None, "message": None},
        {"done": 1, "total": None, "message": None, "updated_at": 1.5},
    ],
)
def test_stored_progress_that_breaks_its_rules_is_refused(stored: dict[str, Any]) -> None:
    raw = json.loads(encode_record(TaskResult(id="t", task_path="m:f")))
    with pytest.raises(PayloadError, match="progress"):
        decode_record(json.dumps({**raw, "progress": stored}).encode())


@pytest.mark.parametrize(
    ("done", "total", "message", "named"),
    [
        (-1, None, None, "done must be a finite number of zero or more"),
        (float("nan"), None, None, "done must be a finite number"),
        (True, None, None, "done must be a finite number"),
        ("5", None, None, "done must be a finite number"),
        (1, 0, None, "total must be None or a finite number above zero"),
        (1, float("inf"), None, "total must be None or a finite number above zero"),
        (3, 2, None, r"done \(3\) is more than its total \(2\)"),
        (1, None, b"bytes", "message must be None or a str"),
        (1, None, "x" * 1_000_001, "1,000,001 characters long; it may have at most 1,000"),
    ],
)
def test_a_bad_progress_is_refused_naming_the_problem(
    done: object, total: object, message: object, named: str
) -> None:
    from threadmill_core import InvalidOption
    from threadmill_core.models import check_progress

    with pytest.raises(InvalidOption, match=named):
        check_progress(done, total, message)
    with pytest.raises(InvalidOption, match=named):
        Progress(done=done, total=total, message=message)  # type: ignore[arg-type]
    check_progress(1, 2, "x" * 1_000)  # the limits themselves are fine
