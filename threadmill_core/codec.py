"""The one codec: task records and values to JSON bytes and back.

Every backend stores what this module produces and never hand-rolls JSON, so
a value that one backend refuses, every backend refuses. Values travel value
for value: integers of any size, floats (``repr`` round trip, so ``0.1`` and
``math.pi`` come back bit for bit, as do ``nan`` and the infinities), str,
bool, None, and lists and str-keyed dicts of these, with dict key order kept.
Anything else (a tuple, a set, a datetime, an `IntEnum`, a dict with int keys)
would come back as something else, so `check_value` refuses it up front and
names where it sits.

Timestamps are encoded as integer milliseconds since the Unix epoch.
"""

from __future__ import annotations

import functools
import itertools
import json
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.fns import identity
from cattrs.gen import make_dict_unstructure_fn, override
from cattrs.v import format_exception

from threadmill_core.clock import from_ms, to_ms
from threadmill_core.errors import PayloadError, UnsupportedValue
from threadmill_core.models import (
    JSON,
    MAX_PRIORITY,
    MIN_PRIORITY,
    RetryPolicySpec,
    TaskError,
    TaskResult,
    copy_call,
    maker,
)

T = TypeVar("T")

_SCALARS = (type(None), bool, int, float, str)


def check_value(value: object, path: str) -> None:
    """Raise `UnsupportedValue` naming the first part of `value` the codec cannot carry.

    Types are checked exactly, not with isinstance: a subclass of int or str
    (an IntEnum, say) would come back as its base class.
    """
    if type(value) is str:
        if not value.isascii():
            try:
                value.encode()
            except UnicodeEncodeError as exc:
                raise UnsupportedValue(
                    path, value, reason=f"is a str that is not valid Unicode text ({exc.reason})"
                ) from None
        return
    if type(value) is int:
        limit = sys.get_int_max_str_digits()
        if limit and value.bit_length() > 3 * limit and abs(value) >= _ten_to(limit):
            raise UnsupportedValue(
                path,
                value,
                reason=f"is an int of more than {limit} decimal digits, which Python will "
                "not parse back (sys.set_int_max_str_digits)",
            )
        return
    if type(value) in _SCALARS:
        return
    if type(value) is list:
        for index, item in enumerate(value):
            if not _carried(item):
                check_value(item, f"{path}[{index}]")
        return
    if type(value) is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise UnsupportedValue(
                    f"{path}[{key!r}]",
                    value,
                    reason=f"has a key of type {type(key).__qualname__}; dict keys must be str",
                )
            if not _carried(item):
                check_value(item, f"{path}[{key!r}]")
        return
    raise UnsupportedValue(path, value)


#: Types the codec carries whatever the value.
_ANY_VALUE = (type(None), bool, float)
#: Ints of at most this many bits parse back whatever `sys.set_int_max_str_digits`
#: allows (640 digits at least, or no limit).
_SHORT_INT_BITS = 3 * 640


def _carried(value: object) -> bool:
    """Whether `value` is a scalar `check_value` lets through at once (the common case).

    A shortcut only: it spares containers of plain values a path string per
    item; False sends the value to `check_value`, which decides.
    """
    if type(value) is str:
        return value.isascii()
    if type(value) is int:
        return value.bit_length() <= _SHORT_INT_BITS
    return type(value) in _ANY_VALUE


def check_arguments(args: tuple[object, ...] | list[object], kwargs: dict[str, object]) -> None:
    """Check a call's arguments; errors name them as ``args[0]`` or ``kwargs['when']``."""
    for index, value in enumerate(args):
        if not _carried(value):
            check_value(value, f"args[{index}]")
    if kwargs or type(kwargs) is not dict:
        check_value(kwargs, "kwargs")


def check_retry(retry: object) -> None:
    """Check a record's retry policy: None, or a `RetryPolicySpec` the codec carries.

    Its path must be a str and its options None or a dict, each as
    `check_value` checks it; `UnsupportedValue` names the part that is not.
    """
    if retry is None:
        return
    if type(retry) is not RetryPolicySpec:
        raise UnsupportedValue(
            "retry", retry, reason=f"must be a RetryPolicySpec or None, got {_kind(retry)}"
        )
    path, options = retry.path, retry.options
    if type(path) is not str:
        raise UnsupportedValue("retry.path", path, reason=f"must be a str, got {_kind(path)}")
    check_value(path, "retry.path")
    if options is not None:
        if type(options) is not dict:
            raise UnsupportedValue(
                "retry.options", options, reason=f"must be a dict or None, got {_kind(options)}"
            )
        check_value(options, "retry.options")


def _kind(value: object) -> str:
    return f"a {type(value).__module__}.{type(value).__qualname__}"


#: The fields of a record that backends key by, which must be str.
_NAMES = ("id", "task_path", "queue")


def check_record(record: TaskResult) -> None:
    """Check a record to enqueue, but for its retry policy: `UnsupportedValue` naming the field.

    Its args must be a list (a tuple would read back as one, None as None)
    and its kwargs a dict, their values as `check_arguments` checks them;
    then its id, task path and queue must each be a str the codec carries.
    Backends key their stores and queues by these, so another type would be
    stored as its text (the id 5 as ``"5"``) and read back changed, or not
    stored at all. The retry policy is `check_retry`'s, once per policy
    object (a batch's records share one). A record both pass always
    encodes: the codec writes whatever these checks let through.
    """
    args, kwargs = record.args, record.kwargs
    if type(args) is not list:
        raise UnsupportedValue("args", args, reason=f"must be a list, got {_kind(args)}")
    if type(kwargs) is not dict:
        raise UnsupportedValue("kwargs", kwargs, reason=f"must be a dict, got {_kind(kwargs)}")
    check_arguments(args, kwargs)
    record_id, task_path, queue = record.id, record.task_path, record.queue
    if (
        type(record_id) is str
        and type(task_path) is str
        and type(queue) is str
        and (record_id + task_path + queue).isascii()
    ):
        return  # the usual record, checked in one test
    for name in _NAMES:
        value = getattr(record, name)
        if type(value) is not str:
            raise UnsupportedValue(name, value, reason=f"must be a str, got {value!r}")
        check_value(value, name)


@functools.cache
def _ten_to(power: int) -> int:
    result: int = 10**power
    return result


def _make_converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True)
    converter.register_unstructure_hook(datetime, to_ms)
    converter.register_structure_hook(datetime, lambda value, _: from_ms(_int(value)))
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
    return converter


def _exactly(kind: type[T]) -> Callable[[object, object], T]:
    """A structure hook that takes a value of exactly type `kind` as it is, and no other."""

    def structure(value: object, _: object) -> T:
        if type(value) is not kind:
            raise TypeError(f"expected a {kind.__name__}, got {value!r}")
        return value

    return structure


def _holds_json(kind: object) -> bool:
    """Whether a field of type `kind` holds checked values: JSON, a list or a dict of them."""
    return kind is JSON or kind == list[JSON] or kind == dict[str, JSON]


def _int(value: object) -> int:
    if type(value) is not int:
        raise TypeError(f"expected integer milliseconds, got {value!r}")
    return value


converter = _make_converter()


#: One encoder for every call: `json.dumps` with options builds a new one each time.
_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def dumps(obj: object) -> bytes:
    """Encode any codec type (a model, a list of models, or a checked value) to JSON bytes."""
    return _encoder.encode(converter.unstructure(obj)).encode()


_decoder = json.JSONDecoder()


def _parse_json(data: bytes | str) -> Any:
    """`json.loads(data)`, a third faster for what `dumps` wrote (UTF-8, no padding).

    Anything else (other encodings, surrounding whitespace, bad JSON) takes
    `json.loads` itself, which accepts or refuses it with its usual error.
    """
    try:
        text = data.decode() if type(data) is bytes else data
        value, end = _decoder.raw_decode(text)  # type: ignore[arg-type]
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
    try:
        return converter.structure(raw, kind)
    except (cattrs.BaseValidationError, cattrs.StructureHandlerNotFoundError) as exc:
        details = "; ".join(cattrs.transform_error(exc, format_exception=_said))
        raise PayloadError(f"stored bytes are not a valid {kind.__name__}: {details}") from exc
    except Exception as exc:  # any other failure to decode means foreign or corrupt bytes
        raise PayloadError(f"stored bytes are not a valid {kind.__name__}: {exc}") from exc


def _said(exc: BaseException, kind: type | None) -> str:
    """cattrs' words for `exc`, with what a ValueError said (a priority's range, say)."""
    words = format_exception(exc, kind)
    return f"{words}: {exc}" if isinstance(exc, ValueError) and str(exc) else words


def encode_record(record: TaskResult) -> bytes:
    return dumps(record)


#: The fields of a record that a backend keeps beside what the producer gave:
#: its status, `run_after`, timestamps, attempts, errors, worker ids and
#: return value. `encode_enqueued` leaves them out.
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
    }
)

_omitted: dict[str, Any] = {name: override(omit=True) for name in STATE_FIELDS}
_unstructure_enqueued = make_dict_unstructure_fn(TaskResult, converter, **_omitted)


def encode_enqueued(record: TaskResult) -> bytes:
    """Encode what a producer gives for a new task: `record` without its `STATE_FIELDS`.

    For a backend that stores those fields beside the payload: the payload
    then never changes, and is about half the size of `encode_record`'s.
    `decode_record` reads it back with each of them at its default.
    """
    return _encoder.encode(_unstructure_enqueued(record)).encode()


#: What records of one task share in their payloads, by (task_path, queue,
#: priority): the encoded text between the id and the args, between the
#: kwargs and the retry policy, and after the kwargs of a record without a
#: policy; ("", "", "") where such records are encoded whole. Made once, from
#: a record whose whole encoding they rebuild exactly.
_shared_parts: dict[tuple[str, str, int], tuple[str, str, str]] = {}
_SHARED_PARTS_LIMIT = 1024


class EnqueuedEncoder:
    """`encode_enqueued`, byte for byte, for the records of one `enqueue` call.

    The calls of one task differ only in id, args and kwargs: what they
    share is encoded once (see `_shared_parts`), so a record costs the
    encoding of its own three fields. A retry policy is encoded once per
    policy object and call (never cached longer: its options are a dict the
    caller could change). A record of another shape (an id that is not a
    str, say) is encoded whole.
    """

    def __init__(self) -> None:
        self._retry: object = None
        self._retry_text = "null"

    def __call__(self, record: TaskResult) -> bytes:
        task_path, queue, record_id = record.task_path, record.queue, record.id
        if type(task_path) is not str or type(queue) is not str or type(record_id) is not str:
            return encode_enqueued(record)
        return self._encode(record, record_id, record.args, record.kwargs, record)

    def call(
        self, shared: TaskResult, task_id: str, args: list[JSON], kwargs: dict[str, JSON]
    ) -> bytes:
        """``self(record)`` for the record `shared` with one call's id and arguments, unmade.

        For the parts of a `threadmill_core.backend.CheckedRecords`, whose
        task path, queue and ids are str: the record is made only where the
        text is not rebuilt from parts.
        """
        return self._encode(shared, task_id, args, kwargs, None)

    def calls(
        self,
        shared: TaskResult,
        ids: Sequence[str],
        args: Sequence[list[JSON]],
        kwargs: Sequence[dict[str, JSON]],
    ) -> list[bytes]:
        """`call` for each of many calls of `shared` (`ids`, `args`, `kwargs` in step), in order.

        What the calls share, and the policy's text, is looked up once for
        all of them, after the first call (which learns the policy's text).
        """
        if not ids:
            return []
        first = self.call(shared, ids[0], args[0], kwargs[0])
        ends = self._ends(shared)
        rest = itertools.islice(zip(ids, args, kwargs, strict=True), 1, None)  # no copies
        if ends is None:  # encoded whole, one by one
            return [first, *(self.call(shared, *call) for call in rest)]
        head, tail = ends
        return [first, *(_call_text(head, tail, *call) for call in rest)]

    def _ends(self, base: TaskResult) -> tuple[str, str] | None:
        """What `base`'s payloads hold around a call's own fields, if known: (head, tail).

        The head goes between the id and the args, the tail after the kwargs
        (the retry policy included); None where the shared parts or this
        policy's text are not known yet.
        """
        parts = _shared_parts.get((base.task_path, base.queue, base.priority))
        if parts is None or not parts[0]:
            return None
        retry = base.retry
        if retry is None:
            return parts[0], parts[2]
        if retry is self._retry:
            return parts[0], f"{parts[1]}{self._retry_text}}}"
        return None

    def _encode(
        self,
        base: TaskResult,
        record_id: str,
        args: list[JSON],
        kwargs: dict[str, JSON],
        record: TaskResult | None,
    ) -> bytes:
        """The payload of `record`: `base` with this id and arguments (made here if None)."""
        ends = self._ends(base)
        if ends is not None:
            return _call_text(*ends, record_id, args, kwargs)
        key = (base.task_path, base.queue, base.priority)
        parts = _shared_parts.get(key) or _share(key, base)
        whole = encode_enqueued(record or _made(base, record_id, args, kwargs))
        if parts[0] and base.retry is not None:
            # A policy first met in this call: its text is cut from the record's whole encoding.
            before = _call_text(parts[0], parts[1], record_id, args, kwargs)
            if whole.startswith(before) and whole.endswith(b"}"):
                self._retry, self._retry_text = base.retry, whole[len(before) : -1].decode()
        return whole


def _call_text(
    head: str, tail: str, task_id: str, args: list[JSON], kwargs: dict[str, JSON]
) -> bytes:
    """A payload from what a task's calls share (`head`, `tail`) and one call's own fields."""
    args_text = "[]" if type(args) is list and not args else _encoder.encode(args)
    kwargs_text = "{}" if type(kwargs) is dict and not kwargs else _encoder.encode(kwargs)
    return f'{{"id":{_encode_str(task_id)}{head}{args_text},"kwargs":{kwargs_text}{tail}'.encode()


#: `_encoder.encode` of a str, without its Python-level dispatch.
_encode_str = json.encoder.encode_basestring


def _made(
    base: TaskResult, record_id: str, args: list[JSON], kwargs: dict[str, JSON]
) -> TaskResult:
    return copy_call(base, {"id": record_id, "args": args, "kwargs": kwargs})


def _share(key: tuple[str, str, int], record: TaskResult) -> tuple[str, str, str]:
    """The parts of `key`'s records' payloads, made from `record`'s and checked against it."""
    raw = _unstructure_enqueued(record)
    parts = ("", "", "")
    if list(raw) == ["id", "task_path", "args", "kwargs", "queue", "priority", "retry"]:
        head = f',"task_path":{_encoder.encode(raw["task_path"])},"args":'
        middle = f',"queue":{_encoder.encode(raw["queue"])},"priority":{raw["priority"]},"retry":'
        rebuilt = (
            f'{{"id":{_encoder.encode(raw["id"])}{head}{_encoder.encode(raw["args"])},'
            f'"kwargs":{_encoder.encode(raw["kwargs"])}{middle}{_encoder.encode(raw["retry"])}}}'
        )
        if rebuilt == _encoder.encode(raw):
            parts = (head, middle, f"{middle}null}}")
    if len(_shared_parts) >= _SHARED_PARTS_LIMIT:
        _shared_parts.clear()
    _shared_parts[key] = parts
    return parts


#: The keys of an `encode_enqueued` payload.
_ENQUEUED_KEYS = frozenset(field.name for field in attrs.fields(TaskResult)) - STATE_FIELDS
_RETRY_KEYS = frozenset({"path", "options"})


def decode_record(data: bytes | str, **fields: Any) -> TaskResult:
    """Decode a record made by `encode_record` or `encode_enqueued`; else `PayloadError`.

    `fields` are set on the record too, checked by its class: a backend that
    keeps the state beside an `encode_enqueued` payload passes the state it
    read back here, so the record is made once, not made and then copied.
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


#: Makes a record from every field, unchecked (`decode_enqueued`).
_make_record = maker(TaskResult)


def decode_enqueued(data: bytes | str, **state: Any) -> TaskResult:
    """`decode_record` of an `encode_enqueued` payload with every field kept beside it.

    For a backend that keeps the `STATE_FIELDS` beside the payload and reads
    them back with it for each task it claims: `state` holds every one of
    them (`TypeError` names one missing). The payload is checked as
    `decode_record` checks it (a payload of any other shape goes to it),
    but the state, which the backend read from its own store, is taken as
    it is (see `evolve_unchecked`), and the record is made without its
    class's validators (`models.maker`): a tenth less work than
    `decode_record`, most of what is left being the JSON itself.
    """
    try:
        raw = _parse_json(data)
    except Exception as exc:  # not JSON (foreign or corrupt bytes), or nested too deep
        raise PayloadError(f"stored bytes are not a valid TaskResult: {exc}") from exc
    record = _enqueued_record(raw, state, _make_record)
    if record is not None:
        return record
    if state.keys() != STATE_FIELDS:  # as `_make_record` refuses them above
        raise TypeError(f"decode_enqueued takes every one of {sorted(STATE_FIELDS)}")
    return decode_record(data, **state)


def _enqueued_payload(raw: Any) -> tuple[Any, ...] | None:
    """The id, task path, args, kwargs, queue, priority and retry policy of a well-formed
    `encode_enqueued` payload, each of the type the record takes; None for any other shape.
    """
    if type(raw) is not dict or raw.keys() != _ENQUEUED_KEYS:
        return None
    retry = raw["retry"]
    if retry is not None:
        if type(retry) is not dict or retry.keys() != _RETRY_KEYS:
            return None
        path, options = retry["path"], retry["options"]
        if type(path) is not str or (options is not None and type(options) is not dict):
            return None
        retry = RetryPolicySpec(path=path, options=options)
    fields = (raw["id"], raw["task_path"], raw["args"], raw["kwargs"], raw["queue"])
    if tuple(map(type, fields)) != (str, str, list, dict, str):
        return None
    priority = raw["priority"]
    if type(priority) is not int or not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        return None  # cattrs words the error
    return (*fields, priority, retry)


def _enqueued_record(
    raw: Any, extra: dict[str, Any], make: Callable[..., TaskResult] = TaskResult
) -> TaskResult | None:
    """The record of a well-formed `encode_enqueued` payload, or None for any other shape.

    Plain type checks (`_enqueued_payload`), then `make` (the class, which
    checks `extra` too, or `_make_record`, which does not). Anything
    unexpected goes to cattrs, which decodes full records and words the
    error.
    """
    payload = _enqueued_payload(raw)
    if payload is None:
        return None
    task_id, task_path, args, kwargs, queue, priority, retry = payload
    return make(
        id=task_id,
        task_path=task_path,
        args=args,
        kwargs=kwargs,
        queue=queue,
        priority=priority,
        retry=retry,
        **extra,
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
