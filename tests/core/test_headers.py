"""A record's headers: bounded, validated, carried by the codec, absent from old payloads."""

from __future__ import annotations

import json
import re

import pytest

from threadmill_core import codec
from threadmill_core.errors import PayloadError, UnsupportedValue
from threadmill_core.headers import MAX_HEADERS, MAX_HEADERS_LENGTH, MAX_NAME_LENGTH
from threadmill_core.models import TaskResult
from threadmill_memory import MemoryBackend

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def record(**fields: object) -> TaskResult:
    return TaskResult(id="t1", task_path="app.tasks:work", args=[1], **fields)  # type: ignore[arg-type]  # the values under test


@pytest.mark.parametrize(
    ("headers", "words"),
    [
        ([("traceparent", TRACEPARENT)], "headers must be a dict of str to str"),
        ({"traceparent": 1}, "header 'traceparent' must be a str, got 1"),
        ({1: "x"}, "header name 1 is not a non-empty ASCII str"),
        ({"": "x"}, "header name '' is not a non-empty ASCII str"),
        ({"clé": "x"}, "header name 'clé' is not a non-empty ASCII str"),
        ({"n" * (MAX_NAME_LENGTH + 1): "x"}, f"longer than {MAX_NAME_LENGTH} characters"),
        ({f"h{i}": "x" for i in range(MAX_HEADERS + 1)}, f"at most {MAX_HEADERS} are allowed"),
        ({"big": "x" * MAX_HEADERS_LENGTH}, f"at most {MAX_HEADERS_LENGTH} are allowed"),
    ],
)
def test_headers_out_of_bounds_are_refused_naming_the_problem(headers: object, words: str) -> None:
    """Headers that are not a small dict of str to str are refused at enqueue, naming them,
    and nothing is stored (the memory backend; the kit's other backends share the check)."""
    backend = MemoryBackend()
    with pytest.raises(UnsupportedValue, match=f"^headers are refused: .*{re.escape(words)}"):
        backend.enqueue([record(headers=headers)])
    with pytest.raises(UnsupportedValue, match=f"^headers are refused: .*{re.escape(words)}"):
        backend.enqueue_calls(record(headers=headers), [("t2", [], {})])
    assert backend.get("t1") is None
    assert backend.get("t2") is None


def test_headers_at_the_bounds_are_taken() -> None:
    """The most headers, the longest name and the most characters are allowed."""
    most = {f"h{i:02}": "" for i in range(MAX_HEADERS)}
    assert MemoryBackend().enqueue([record(headers=most)])[0].headers == most
    full = {"n" * MAX_NAME_LENGTH: "v" * (MAX_HEADERS_LENGTH - MAX_NAME_LENGTH)}
    assert codec.decode_record(codec.encode_enqueued(record(headers=full))).headers == full


@pytest.mark.parametrize("encode", [codec.encode_enqueued, codec.encode_record])
def test_a_record_without_headers_is_encoded_as_before_and_reads_as_empty(
    encode: object,
) -> None:
    """No headers: no ``headers`` key in the bytes (readable by code that predates them)."""
    data = encode(record())  # type: ignore[operator]  # one of the two encoders
    assert "headers" not in json.loads(data)
    assert codec.decode_record(data).headers == {}


@pytest.mark.parametrize("encode", [codec.encode_enqueued, codec.encode_record])
def test_headers_round_trip_through_the_codec(encode: object) -> None:
    """Headers come back as given, beside (never inside) the arguments."""
    headers = {"traceparent": TRACEPARENT, "tracestate": "rojo=00f067aa0ba902b7"}
    data = encode(record(headers=headers))  # type: ignore[operator]  # one of the two encoders
    made = codec.decode_record(data)
    assert (made.headers, made.args, made.kwargs) == (headers, [1], {})


def test_stored_headers_that_break_the_bounds_are_a_payload_error() -> None:
    """Stored bytes whose headers are not a bounded dict of str decode to `PayloadError`."""
    good = json.loads(codec.encode_enqueued(record(headers={"traceparent": TRACEPARENT})))
    for bad, words in (
        ({"traceparent": 5}, "header 'traceparent' must be a str"),
        ([], r"expected dict @ \$\.headers"),
        ({"x": "y" * MAX_HEADERS_LENGTH}, "at most 2048 are allowed"),
    ):
        with pytest.raises(PayloadError, match=words):
            codec.decode_record(json.dumps({**good, "headers": bad}))
