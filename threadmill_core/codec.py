"""The one codec: task records and values to JSON bytes and back, through one cattrs converter.

Every backend stores what this module produces and never hand-rolls JSON, so
a value that one backend refuses, every backend refuses. What may be encoded
is decided by the checks of `threadmill_core.values` (`check_value`,
`check_arguments`, `check_record`, `check_retry`, offered here too): a value
they let through comes back value for value, floats bit for bit (``repr``
round trip: ``0.1``, ``math.pi``, ``nan`` and the infinities) and dict key
order kept. Decoding is strict: stored bytes decode to exactly the types
written, or raise `PayloadError` (a corrupt payload is poison, never a task
run with changed arguments).

Timestamps are encoded as integer milliseconds since the Unix epoch, and a
record's `time_limit` as positive integer milliseconds (rounded up).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from threadmill_core.clock import duration_ms, from_ms, to_ms
from threadmill_core.display import short_repr
from threadmill_core.errors import PayloadError
from threadmill_core.headers import headers_problem
from threadmill_core.models import (
    JSON,
    MAX_PRIORITY,
    MIN_PRIORITY,
    Progress,
    RetryPolicySpec,
    TaskCall,
    TaskError,
    TaskResult,
)
from threadmill_core.values import (
    check_arguments,
    check_call,
    check_record,
    check_retry,
    check_value,
)

if TYPE_CHECKING:
    import cattrs

__all__ = [
    "CALL_FIELDS",
    "STATE_FIELDS",
    "check_arguments",
    "check_call",
    "check_record",
    "check_retry",
    "check_value",
    "converter",  # noqa: F822  # built on first use, through the module's __getattr__
    "decode_errors",
    "decode_record",
    "decode_value",
    "dumps",
    "encode_calls",
    "encode_enqueued",
    "encode_errors",
    "encode_record",
    "encode_value",
    "loads",
]

T = TypeVar("T")


@functools.cache
def _converter() -> cattrs.Converter:
    """The converter, built (and cattrs imported) when first needed.

    A worker whose tasks take the fast paths (`decode_record` of an
    `encode_enqueued` payload, `encode_value`, `encode_errors` of no
    errors) never needs it: cattrs and the converter's generated code are
    start-up time it would wait through for nothing.
    """
    import cattrs
    from cattrs.fns import identity

    converter = cattrs.Converter(forbid_extra_keys=True)
    converter.register_unstructure_hook(datetime, to_ms)
    converter.register_structure_hook(datetime, lambda value, _: from_ms(_int(value)))
    converter.register_unstructure_hook(timedelta, duration_ms)
    converter.register_structure_hook(timedelta, lambda value, _: _limit(value))
    converter.register_structure_hook(Progress, _progress)
    # Payload values were checked on the way in; pass them through untouched,
    # both ways. json writes lists, dicts and scalars as they are, so copying
    # them first would only cost time; with `identity` the generated code
    # reads such fields without any call.
    converter.register_structure_hook(JSON, lambda value, _: value)
    converter.register_unstructure_hook_func(_holds_json, identity)
    # Stored bytes decode to exactly what was written, or not at all: cattrs
    # would make the str "5" of an id 5, and the list ["a", "b"] of args
    # "ab", and a worker would run that. Refused, such a task is poison.
    converter.register_structure_hook(str, _exactly(str))
    converter.register_structure_hook(int, _exactly(int))
    converter.register_structure_hook_func(lambda kind: kind == list[JSON], _exactly(list))
    converter.register_structure_hook_func(lambda kind: kind == dict[str, JSON], _exactly(dict))
    # Headers: a dict taken as it is, within `threadmill_core.headers`' bounds.
    converter.register_structure_hook_func(lambda kind: kind == dict[str, str], _headers)
    # A record without headers (most) is written without the key, as before headers
    # existed: its bytes are unchanged, and code that predates them reads it. So is
    # one without a time limit, progress or cancel request.
    from cattrs.gen import make_dict_unstructure_fn

    converter.register_unstructure_hook(
        TaskResult, make_dict_unstructure_fn(TaskResult, converter, **_omitted_if_default())
    )
    return converter


#: The fields of a record written only when they are not at their default.
_OPTIONAL_FIELDS = ("headers", "time_limit", "progress", "cancel_requested_at")


def _omitted_if_default() -> dict[str, Any]:
    """cattrs overrides for `_OPTIONAL_FIELDS`: omitted when at their default."""
    from cattrs.gen import override

    return {name: override(omit_if_default=True) for name in _OPTIONAL_FIELDS}


def _exactly(kind: type[T]) -> Callable[[object, object], T]:
    """A structure hook that takes a value of exactly type `kind` as it is, and no other."""

    def structure(value: object, _: object) -> T:
        if type(value) is not kind:
            # Cut: the value may be a megabyte, and the message is logged and stored.
            raise TypeError(f"expected a {kind.__name__}, got {short_repr(value)}")
        return value

    return structure


def _headers(value: object, _: object) -> dict[str, str]:
    """A record's stored headers: a dict within the bounds, taken as it is."""
    if type(value) is not dict:
        raise TypeError(f"expected a dict, got {short_repr(value)}")
    problem = headers_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _limit(value: object) -> timedelta:
    """A stored `time_limit`: positive integer milliseconds."""
    if type(value) is not int or value <= 0:
        raise ValueError(f"expected positive integer milliseconds, got {short_repr(value)}")
    return timedelta(milliseconds=value)


def _progress(value: object, _: object) -> Progress:
    """A stored `Progress`: its four keys, each of its type, within `check_progress`."""
    if type(value) is not dict or value.keys() != _PROGRESS_KEYS:
        raise TypeError(f"expected a progress object, got {short_repr(value)}")
    updated_at = value["updated_at"]
    message = value["message"]
    if message is not None and type(message) is not str:
        raise TypeError(f"expected a str message, got {short_repr(message)}")
    return Progress(
        done=value["done"],
        total=value["total"],
        message=message,
        updated_at=None if updated_at is None else from_ms(_int(updated_at)),
    )


_PROGRESS_KEYS = frozenset(field.name for field in attrs.fields(Progress))


def _holds_json(kind: object) -> bool:
    """Whether a field of type `kind` holds checked values: JSON, a list or a dict of them."""
    return kind is JSON or kind == list[JSON] or kind == dict[str, JSON]


def _int(value: object) -> int:
    if type(value) is not int:
        raise TypeError(f"expected integer milliseconds, got {short_repr(value)}")
    return value


def __getattr__(name: str) -> cattrs.Converter:
    """`converter`: the one cattrs converter, built on first use (see `_converter`)."""
    if name == "converter":
        return _converter()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: One encoder for every call: `json.dumps` with options builds a new one each time.
#: It does not look for cycles: what it is given was checked (`check_value`), which
#: refuses a value that holds itself.
_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False)


def dumps(obj: object) -> bytes:
    """Encode any codec type (a model, a list of models, or a checked value) to JSON bytes."""
    return _encoder.encode(_converter().unstructure(obj)).encode()


_decoder = json.JSONDecoder()


def _parse_json(data: bytes | str) -> Any:
    """`json.loads(data)`, for what `dumps` wrote (UTF-8, no padding) without its detection.

    Anything else (other encodings, surrounding whitespace, bad JSON) takes
    `json.loads` itself, which accepts or refuses it with its usual error.
    """
    try:
        text = data.decode() if isinstance(data, bytes) else data
        value, end = _decoder.raw_decode(text)
        if end == len(text):
            return value
    except ValueError:
        pass
    return json.loads(data)


def loads(data: bytes | str, kind: type[T]) -> T:
    """Decode bytes made by `dumps` into `kind`; any mismatch is a `PayloadError`."""
    try:
        raw = _parse_json(data)
    except Exception as exc:  # not JSON (foreign or corrupt bytes), or nested too deep
        raise PayloadError(f"stored bytes are not a valid {kind.__name__}: {exc}") from exc
    return _structure(raw, kind)


def _structure(raw: Any, kind: type[T]) -> T:
    """`raw` (decoded JSON) as `kind`; any mismatch is a `PayloadError`."""
    import cattrs

    try:
        return _converter().structure(raw, kind)
    except (cattrs.BaseValidationError, cattrs.StructureHandlerNotFoundError) as exc:
        details = "; ".join(cattrs.transform_error(exc, format_exception=_said))
        raise PayloadError(f"stored bytes are not a valid {kind.__name__}: {details}") from exc
    except Exception as exc:  # any other failure to decode means foreign or corrupt bytes
        raise PayloadError(f"stored bytes are not a valid {kind.__name__}: {exc}") from exc


def _said(exc: BaseException, kind: type | None) -> str:
    """cattrs' words for `exc`, with what a ValueError said (a priority's range, say)."""
    from cattrs.v import format_exception

    words = format_exception(exc, kind)
    return f"{words}: {exc}" if isinstance(exc, ValueError) and str(exc) else words


def encode_record(record: TaskResult) -> bytes:
    return dumps(record)


#: The fields of a record that a backend keeps beside what the producer gave:
#: its status, `run_after`, timestamps, attempts, errors, worker ids, return
#: value, progress and cancel request. `encode_enqueued` leaves them out.
STATE_FIELDS = frozenset(
    {
        "status",
        "enqueued_at",
        "run_after",
        "started_at",
        "last_attempted_at",
        "finished_at",
        "attempts",
        "errors",
        "worker_ids",
        "return_value",
        "progress",
        "cancel_requested_at",
    }
)

#: The fields of an `encode_enqueued` payload that are each call's own; they come last.
CALL_FIELDS = ("id", "args", "kwargs")


#: The fields an `encode_enqueued` payload leaves out at their defaults besides
#: `_OPTIONAL_FIELDS`: a plain task's payload is its task path and id alone.
_DEFAULTED_FIELDS = ("queue", "priority", "retry")


@functools.cache
def _unstructure_shared() -> Callable[[TaskResult], dict[str, Any]]:
    """The converter's unstructure function for `TaskResult` without `STATE_FIELDS` and
    `CALL_FIELDS`, and without `_OPTIONAL_FIELDS` and `_DEFAULTED_FIELDS` at their
    defaults: what the calls of one task share."""
    from cattrs.gen import make_dict_unstructure_fn, override

    omitted = _omitted_if_default()
    omitted.update((name, override(omit_if_default=True)) for name in _DEFAULTED_FIELDS)
    omitted.update((name, override(omit=True)) for name in (*STATE_FIELDS, *CALL_FIELDS))
    return make_dict_unstructure_fn(TaskResult, _converter(), **omitted)


def encode_enqueued(record: TaskResult) -> bytes:
    """Encode what a producer gives for a new task: `record` without its `STATE_FIELDS`.

    For a backend that stores those fields beside the payload: the payload
    then never changes after `enqueue`. `decode_record` reads it back with
    each of them at its default, or as the backend passes them. The
    payload's keys are those the calls of a task share, in the record's
    field order, then the `CALL_FIELDS`. A key whose value is the field's
    default is left out (`queue`, `priority`, `retry`, `headers`,
    `time_limit`, and empty `args` or `kwargs`): a task with no arguments
    on the default queue is stored as its task path and id. The time limit
    is written as integer milliseconds.

    Code that wrote every key reads such a payload too: its fast path
    passes it to the converter, which fills in each missing key's default
    (``tests/core/test_fast_paths.py`` holds the converter to it), so a
    worker one release behind runs what a newer producer enqueued.
    """
    [payload] = encode_calls(record, [(record.id, record.args, record.kwargs)])
    return payload


def encode_calls(template: TaskResult, calls: Sequence[TaskCall]) -> list[bytes]:
    """The `encode_enqueued` payload of each call's record, in order, byte for byte.

    A call's record is `template` with the call's id and arguments (see
    `threadmill_core.models.call_record`). What the calls share (task path,
    queue, priority, retry policy) is unstructured and encoded once per
    call of this function, as one JSON object; each call's own fields (its
    id, and its args and kwargs where it has any) are encoded as another,
    or one by one where that costs less, and joined to that object's
    members. Nothing encoded is kept after the call returns.
    """
    fields = _unstructure_shared()(template)  # a new dict, ours to fill in
    if len(calls) == 1:  # one object: one encoding, nothing to join
        [(task_id, args, kwargs)] = calls
        fields["id"] = task_id
        if args:
            fields["args"] = args
        if kwargs:
            fields["kwargs"] = kwargs
        return [_encoder.encode(fields).encode()]
    # The shared object without its closing brace, for a call's own members to follow.
    # The encoder sets itself up anew for each list or dict it is given: a call with
    # keyword arguments is encoded as one object, and one without them piece by piece.
    head = _encoder.encode(fields)[:-1] + ","
    payloads: list[bytes] = []
    for task_id, args, kwargs in calls:
        if kwargs:
            own: dict[str, Any] = {"id": task_id, "args": args} if args else {"id": task_id}
            own["kwargs"] = kwargs
            members = _encoder.encode(own)[1:]
        else:
            members = '"id":' + _encoder.encode(task_id)
            if args:
                members += ',"args":' + _encoder.encode(args)
            members += "}"
        payloads.append((head + members).encode())
    return payloads


#: The keys an `encode_enqueued` payload may hold, and those it always holds.
_ENQUEUED_KEYS = frozenset(field.name for field in attrs.fields(TaskResult)) - STATE_FIELDS
_REQUIRED_KEYS = frozenset({"id", "task_path"})
_DEFAULTS = TaskResult(id="", task_path="")
_RETRY_KEYS = frozenset({"path", "options"})
#: The longest time limit a `timedelta` holds, in whole milliseconds.
_MAX_LIMIT_MS = timedelta.max // timedelta(milliseconds=1)


def decode_record(data: bytes | str, **fields: Any) -> TaskResult:
    """Decode a record made by `encode_record` or `encode_enqueued`; else `PayloadError`.

    `fields` are set on the record too, checked by its class: a backend that
    keeps the state beside an `encode_enqueued` payload passes the state it
    read back here, so the record is made once, not made and then copied.
    A well-formed `encode_enqueued` payload is read with plain type checks
    (`_enqueued_payload`); anything else goes to the converter, which
    decodes full records and words what is wrong.
    """
    try:
        raw = _parse_json(data)
    except Exception as exc:  # not JSON (foreign or corrupt bytes), or nested too deep
        raise PayloadError(f"stored bytes are not a valid TaskResult: {exc}") from exc
    record = _enqueued_record(raw, fields)
    if record is not None:
        return record
    record = _structure(raw, TaskResult)
    return attrs.evolve(record, **fields) if fields else record


def _enqueued_payload(raw: Any) -> tuple[Any, ...] | None:
    """The id, task path, args, kwargs, queue, priority and retry policy of a well-formed
    `encode_enqueued` payload, each of the type the record takes (a key left out at its
    default), its headers (None: the payload has none) and its time limit (None: none);
    None for any other shape.
    """
    if type(raw) is not dict:
        return None
    keys = raw.keys()
    if not _REQUIRED_KEYS <= keys <= _ENQUEUED_KEYS:
        return None
    headers = None
    if "headers" in keys:
        headers = raw["headers"]
        if headers_problem(headers) is not None:
            return None  # the converter words the error
    time_limit = raw.get("time_limit")
    if time_limit is not None:
        if type(time_limit) is not int or not 0 < time_limit <= _MAX_LIMIT_MS:
            return None  # the converter words the error
        time_limit = timedelta(milliseconds=time_limit)
    retry = raw.get("retry")
    if retry is not None:
        if type(retry) is not dict or retry.keys() != _RETRY_KEYS:
            return None
        path, options = retry["path"], retry["options"]
        if type(path) is not str or (options is not None and type(options) is not dict):
            return None
        retry = RetryPolicySpec(path=path, options=options)
    fields = (
        raw["id"],
        raw["task_path"],
        raw["args"] if "args" in keys else [],
        raw["kwargs"] if "kwargs" in keys else {},
        raw.get("queue", _DEFAULTS.queue),
    )
    if tuple(map(type, fields)) != (str, str, list, dict, str):
        return None
    priority = raw.get("priority", _DEFAULTS.priority)
    if type(priority) is not int or not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        return None  # cattrs words the error
    return (*fields, priority, retry, headers, time_limit)


def _enqueued_record(raw: Any, fields: dict[str, Any]) -> TaskResult | None:
    """The record of a well-formed `encode_enqueued` payload with `fields`; else None."""
    payload = _enqueued_payload(raw)
    if payload is None:
        return None
    task_id, task_path, args, kwargs, queue, priority, retry, headers, time_limit = payload
    if headers is not None:
        fields = {**fields, "headers": headers}
    if time_limit is not None:
        fields = {**fields, "time_limit": time_limit}
    return TaskResult(
        id=task_id,
        task_path=task_path,
        args=args,
        kwargs=kwargs,
        queue=queue,
        priority=priority,
        retry=retry,
        **fields,
    )


def encode_value(value: JSON) -> bytes:
    """Encode a checked value (a task's return value, say): json takes it as it is."""
    return _encoder.encode(value).encode()


def decode_value(data: bytes | str) -> Any:
    try:
        return _parse_json(data)
    except ValueError as exc:
        raise PayloadError(f"stored bytes are not a valid value: {exc}") from exc


_NO_ERRORS = b"[]"


def encode_errors(errors: tuple[TaskError, ...]) -> bytes:
    if not errors:  # most acknowledgements: a first attempt that succeeded
        return _NO_ERRORS
    return dumps(list(errors))


def decode_errors(data: bytes | str) -> tuple[TaskError, ...]:
    if data == _NO_ERRORS:
        return ()
    errors: list[TaskError] = loads(data, list[TaskError])
    return tuple(errors)
