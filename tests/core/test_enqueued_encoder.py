"""`EnqueuedEncoder` writes exactly what `encode_enqueued` writes, whatever records share."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from threadmill_core.codec import (
    EnqueuedEncoder,
    check_arguments,
    check_record,
    check_retry,
    check_value,
    encode_enqueued,
)
from threadmill_core.errors import UnsupportedValue
from threadmill_core.models import RetryPolicySpec, TaskResult, new_task_id
from threadmill_core.testing import strategies

records = st.builds(
    TaskResult,
    id=st.one_of(st.uuids().map(str), st.sampled_from(("", 'quote"d', "ü\x00"))),
    task_path=st.one_of(strategies.task_paths(), st.sampled_from(('a:"b"', "x:\\y"))),
    args=strategies.task_args(),
    kwargs=strategies.task_kwargs(),
    queue=strategies.queue_names(),
    priority=strategies.priorities(),
    retry=strategies.retry_specs(),
)


@given(st.lists(records, max_size=6))
def test_every_record_encodes_as_encode_enqueued_encodes_it(batch: list[TaskResult]) -> None:
    """Records of any mix of tasks, queues, priorities and policies: the same bytes."""
    encode = EnqueuedEncoder()
    assert [encode(record) for record in batch] == [encode_enqueued(r) for r in batch]


@given(records, st.lists(st.tuples(strategies.task_args(), strategies.task_kwargs()), max_size=4))
def test_the_calls_of_one_task_encode_as_encode_enqueued_encodes_them(
    first: TaskResult, calls: list[tuple[list[object], dict[str, object]]]
) -> None:
    """Records sharing task path, queue, priority and policy objects, as a batch has them."""
    batch = [first] + [
        attrs.evolve(first, id=new_task_id(), args=args, kwargs=kwargs) for args, kwargs in calls
    ]
    encode = EnqueuedEncoder()
    assert [encode(record) for record in batch] == [encode_enqueued(r) for r in batch]


@given(records, st.lists(st.tuples(strategies.task_args(), strategies.task_kwargs()), max_size=4))
def test_a_call_encodes_from_its_parts_as_its_record_would(
    shared: TaskResult, calls: list[tuple[list[object], dict[str, object]]]
) -> None:
    """`EnqueuedEncoder.call`: the shared record with a call's id and arguments, never made."""
    encode = EnqueuedEncoder()
    ids = [new_task_id() for _ in calls]
    got = [encode.call(shared, i, a, k) for i, (a, k) in zip(ids, calls, strict=True)]
    expected = [
        encode_enqueued(attrs.evolve(shared, id=i, args=a, kwargs=k))
        for i, (a, k) in zip(ids, calls, strict=True)
    ]
    assert got == expected


@given(
    records,
    st.lists(
        st.tuples(
            st.one_of(st.uuids().map(str), st.sampled_from(('quote"d', "ü\x00", ""))),
            strategies.task_args(),
            strategies.task_kwargs(),
        ),
        max_size=5,
    ),
)
def test_many_calls_encode_as_each_call_on_its_own(
    shared: TaskResult, calls: list[tuple[str, list[object], dict[str, object]]]
) -> None:
    """`EnqueuedEncoder.calls`: what `call` gives each call, by an encoder of its own."""
    ids = [task_id for task_id, _, _ in calls]
    args = [call_args for _, call_args, _ in calls]
    kwargs = [call_kwargs for _, _, call_kwargs in calls]
    expected = [
        encode_enqueued(attrs.evolve(shared, id=i, args=a, kwargs=k))
        for i, a, k in zip(ids, args, kwargs, strict=True)
    ]
    assert EnqueuedEncoder().calls(shared, ids, args, kwargs) == expected  # type: ignore[arg-type]
    event("shared parts known" if EnqueuedEncoder()._ends(shared) else "encoded whole")


def test_a_policy_whose_options_changed_is_encoded_afresh_by_the_next_call() -> None:
    """An encoder remembers a policy's encoding for one call only: its options are a dict."""
    options: dict[str, object] = {"base": 1}
    record = TaskResult(
        id=new_task_id(),
        task_path="app:work",
        retry=RetryPolicySpec(path="app:policy", options=options),
    )
    assert EnqueuedEncoder()(record) == encode_enqueued(record)
    options["base"] = 2
    assert EnqueuedEncoder()(record) == encode_enqueued(record)
    assert b'"base":2' in encode_enqueued(record)


def test_records_of_another_shape_are_encoded_whole() -> None:
    """An id, task path or queue that is not a str still encodes as encode_enqueued has it."""
    odd = [
        TaskResult(id=7, task_path="app:work"),  # type: ignore[arg-type]  # on purpose
        TaskResult(id="x", task_path=["app", "work"]),  # type: ignore[arg-type]  # on purpose
        TaskResult(id="y", task_path="app:work", queue=3),  # type: ignore[arg-type]  # on purpose
    ]
    encode = EnqueuedEncoder()
    assert [encode(record) for record in odd] == [encode_enqueued(r) for r in odd]


@pytest.mark.parametrize(
    ("args", "kwargs", "where"),
    [
        ([1, "ok", 2.5, None, True, (1,)], {}, "args[5]"),
        (["\ud800"], {}, "args[0]"),
        ([[1, [2, {"a": {3}}]]], {}, "args[0][1][1]['a']"),
        ([], {"when": 10**5000}, "kwargs['when']"),
        ([], {"ok": "fine", 3: "key"}, "kwargs[3]"),
    ],
)
def test_checks_still_name_the_first_value_the_codec_cannot_carry(
    args: list[object], kwargs: dict[object, object], where: str
) -> None:
    """Plain values are let through at once; anything else is checked and named by its path."""
    with pytest.raises(UnsupportedValue) as raised:
        check_arguments(args, kwargs)  # type: ignore[arg-type]  # bad on purpose
    assert raised.value.path == where


def test_plain_values_of_every_kind_pass_the_checks() -> None:
    """Long ints up to the parse limit, non-ASCII text, nested containers: all carried."""
    check_arguments([2**6000, -(2**1900), "日本語", [None, {"x": [0.5]}]], {"k": "ü"})
    check_value({"a": [1, 2, 3]}, "value")


#: Values of every kind, the codec's own and others: tuples, sets, bytes, objects,
#: lone surrogates, dicts keyed by ints.
anything = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(st.characters(exclude_categories=())),  # surrogates too
        st.binary(max_size=4),
        st.builds(object),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner),
        st.frozensets(st.integers(), max_size=2),
        st.dictionaries(st.one_of(st.text(max_size=3), st.integers()), inner, max_size=3),
    ),
    max_leaves=8,
)
#: Names as a caller might get them wrong: text with lone surrogates half the time.
names = st.one_of(st.text(st.characters(categories=["Cs", "Ll"]), min_size=1, max_size=3), anything)
#: Where a record may go wrong, one place per example; "nowhere" keeps it good.
PLACES = ("nowhere", "id", "task_path", "queue", "args", "kwargs", "retry", "path", "options")


@pytest.mark.parametrize("place", PLACES)
@given(good=records, data=st.data())
def test_a_record_the_checks_pass_always_encodes(
    place: str, good: TaskResult, data: st.DataObject
) -> None:
    """`check_record` and `check_retry` refuse whatever the encoder cannot write.

    So a backend may check every record of a batch first and encode each
    part of it only as it sends it, as the Redis backend does: no record
    can fail after the first part was sent. Each example is a good record
    with one field, or one part of its retry policy, drawn from anything.
    """
    policy = good.retry or RetryPolicySpec(path="app:policy")
    value = data.draw(names if place in ("id", "task_path", "queue", "path") else anything)
    if place == "nowhere":
        record = good
    elif place == "retry":
        record = attrs.evolve(good, retry=value)  # type: ignore[arg-type]  # on purpose
    elif place in ("path", "options"):
        if place == "options" and data.draw(st.booleans()):  # a dict holding anything
            value = data.draw(st.dictionaries(st.text(max_size=3), anything, max_size=2))
        record = attrs.evolve(good, retry=attrs.evolve(policy, **{place: value}))
    else:
        record = attrs.evolve(good, **{place: value})
    try:
        check_record(record)
        check_retry(record.retry)
    except UnsupportedValue:
        event(f"refused: {place}")
        return
    event(f"encoded: {place}")
    assert EnqueuedEncoder()(record) == encode_enqueued(record)
