"""What the codec carries, checked before anything is encoded or stored.

Values travel value for value: integers of any size, floats, str, bool,
None, and lists and str-keyed dicts of these, with dict key order kept.
Anything else (a tuple, a set, a datetime, an `IntEnum`, a dict with int
keys) would come back as something else, so these checks refuse it up front
with an `UnsupportedValue` that names where it sits (``args[0]``,
``kwargs['when']``, ``retry.options``). A record that passes `check_record`
and `check_retry` always encodes: `threadmill_core.codec` writes whatever
these let through. Backends call them through `threadmill_core.codec`.
"""

from __future__ import annotations

import functools
import sys

from threadmill_core.errors import UnsupportedValue
from threadmill_core.headers import check_headers
from threadmill_core.models import RetryPolicySpec, TaskResult

_SCALARS = (type(None), bool, int, float, str)


#: How deeply lists and dicts may nest in one value (an argument, a keyword
#: argument's value, a return value): ``[[1]]`` nests 2 deep. Decoding a stored
#: payload recurses once per level, on whatever stack the reader runs (a worker
#: thread's may be far deeper than the producer's, or small), so a value is
#: accepted only well under Python's recursion limit (1,000 frames): then every
#: backend that stores it decodes it everywhere (serde_json stops at 128 too).
MAX_DEPTH = 128


class _TooDeep(Exception):
    """Raised inside `_check_value` where nesting passes `MAX_DEPTH`; `check_value` words it."""


def check_value(value: object, path: str) -> None:
    """Raise `UnsupportedValue` naming the first part of `value` the codec cannot carry.

    Types are checked exactly, not with isinstance: a subclass of int or str
    (an IntEnum, say) would come back as its base class. A value nesting
    lists and dicts more than `MAX_DEPTH` deep is refused, with `path` (where
    the value sits) and the limit in the message; so is a value that holds
    itself (it nests without end), which the encoder could not write (it
    does not look for cycles itself).
    """
    try:
        _check_value(value, path, MAX_DEPTH)
    except (_TooDeep, RecursionError):  # RecursionError: checked on an already deep stack
        raise UnsupportedValue(
            path,
            value,
            reason=f"nests lists and dicts more than {MAX_DEPTH} deep (or holds itself); "
            f"threadmill carries at most {MAX_DEPTH} levels, so that every backend can "
            "read back what it stores",
        ) from None


def _check_value(value: object, path: str, levels: int) -> None:
    """Check `value` (at `path`) with `levels` more levels of lists and dicts allowed."""
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
        if not levels:
            raise _TooDeep
        for index, item in enumerate(value):
            if not _carried(item):
                _check_value(item, f"{path}[{index}]", levels - 1)
        return
    if type(value) is dict:
        if not levels:
            raise _TooDeep
        for key, item in value.items():
            if type(key) is not str:
                raise _bad_key(path, key, value)
            if not _carried(item):
                _check_value(item, f"{path}[{key!r}]", levels - 1)
        return
    raise UnsupportedValue(path, value)


def _bad_key(path: str, key: object, container: object) -> UnsupportedValue:
    """The error for a dict at `path` with a `key` that is not a str."""
    return UnsupportedValue(
        f"{path}[{key!r}]",
        container,
        reason=f"has a key of type {type(key).__qualname__}; dict keys must be str",
    )


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
    if type(kwargs) is not dict:
        check_value(kwargs, "kwargs")
        return
    for key, value in kwargs.items():  # each value as an argument of its own, by its name
        if type(key) is not str:
            raise _bad_key("kwargs", key, kwargs)
        if not _carried(value):
            check_value(value, f"kwargs[{key!r}]")


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


def check_record(record: TaskResult) -> None:
    """Check a record to enqueue, but for its retry policy: `UnsupportedValue` naming the field.

    Its id and arguments as `check_call` checks them; then its task path and
    queue must each be a str the codec carries, and its headers within
    `threadmill_core.headers`' bounds. Backends key their stores
    and queues by these, so another type would be stored as its text (the
    id 5 as ``"5"``) and read back changed, or not stored at all. The retry
    policy is `check_retry`'s, once per policy object (a batch's records
    share one). A record both pass always encodes: the codec writes whatever
    these checks let through.
    """
    check_call(record.id, record.args, record.kwargs)
    check_task(record.task_path, record.queue)
    headers = record.headers
    if headers.__class__ is not dict or headers:  # most records have none: one test
        check_headers(headers)


def check_task(task_path: object, queue: object) -> None:
    """Check a task path and a queue as `check_record` does: each a str the codec carries."""
    if type(task_path) is str and type(queue) is str and (task_path + queue).isascii():
        return  # the usual record, checked in one test
    for name, value in (("task_path", task_path), ("queue", queue)):
        if type(value) is not str:
            raise UnsupportedValue(name, value, reason=f"must be a str, got {value!r}")
        check_value(value, name)


def check_call(task_id: object, args: object, kwargs: object) -> None:
    """Check one call to enqueue: its id and arguments, as `check_record` checks a record's.

    The args must be a list (a tuple would read back as one, None as None)
    and the kwargs a dict, their values as `check_arguments` checks them;
    the id a str the codec carries.
    """
    if type(args) is not list:
        raise UnsupportedValue("args", args, reason=f"must be a list, got {_kind(args)}")
    if type(kwargs) is not dict:
        raise UnsupportedValue("kwargs", kwargs, reason=f"must be a dict, got {_kind(kwargs)}")
    check_arguments(args, kwargs)
    if type(task_id) is not str:
        raise UnsupportedValue("id", task_id, reason=f"must be a str, got {task_id!r}")
    if not task_id.isascii():
        check_value(task_id, "id")


@functools.cache
def _ten_to(power: int) -> int:
    result: int = 10**power
    return result
