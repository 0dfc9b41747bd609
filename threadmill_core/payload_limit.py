"""The broker's limit on a call's size: ``max_payload_bytes``, checked at enqueue.

A call's size is its arguments as the codec writes them: ``[args, kwargs]``
as UTF-8 JSON. A call over the limit is refused with `PayloadTooLarge`
before anything is stored, so a 50 MB argument is never kept for the result
TTL and copied to every worker that claims it.

The limit is the broker's, not the backend's: ``connect(url,
max_payload_bytes=...)`` or ``?max_payload_bytes=...`` in the URL (taken out
before the backend reads the URL, so every backend takes it), or
``Broker(backend, max_payload_bytes=...)``. The default, 1 MiB, is what
hosted queues allow a message (Amazon SQS, Google Cloud Tasks): enough for
any call that carries data by value, while a larger one almost always wants
its data stored elsewhere and passed by reference (a path, a URL, a key).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from threadmill_core.codec import encode_value
from threadmill_core.errors import InvalidOption, PayloadTooLarge
from threadmill_core.models import TaskCall
from threadmill_core.options import positive_int

#: The default `max_payload_bytes`: 1 MiB.
DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024

#: The option's name, as a keyword of `connect` and in a URL's query.
OPTION = "max_payload_bytes"

#: Calls of a batch measured together by `check_batch`.
_CHUNK = 1000


def call_size(args: Sequence[Any], kwargs: Mapping[str, Any]) -> int | None:
    """The bytes of ``[args, kwargs]`` as the codec writes them; None if it could not.

    A call the codec cannot write (a set, a value that holds itself) is the
    backend's checks' to refuse, by name: None leaves it to them.
    """
    return _size([args, kwargs])


def _size(value: object) -> int | None:
    try:
        return len(encode_value(value))
    except (TypeError, ValueError, RecursionError):  # not carried: refused by name later
        return None


def check_call(task_path: str, args: Sequence[Any], kwargs: Mapping[str, Any], limit: int) -> None:
    """`PayloadTooLarge` if the call's arguments are more than `limit` bytes."""
    size = call_size(args, kwargs)
    if size is not None and size > limit:
        raise PayloadTooLarge(task_path, size, limit)


def check_batch(task_path: str, calls: Sequence[TaskCall], limit: int) -> None:
    """`PayloadTooLarge` naming the first call of `calls` over `limit` bytes, by its index.

    Fast path: the calls are measured a thousand at a time, ids
    included, and only a thousand that is over the limit together is
    measured call by call: one encoding per thousand calls instead of one
    per call (see docs/hot-paths.md).
    """
    for start in range(0, len(calls), _CHUNK):
        chunk = calls[start : start + _CHUNK]
        size = _size(chunk)
        if size is not None and size <= limit:
            continue  # no call is larger than all of them together
        for offset, (_, args, kwargs) in enumerate(chunk):
            one = call_size(args, kwargs)
            if one is not None and one > limit:
                raise PayloadTooLarge(task_path, one, limit, index=start + offset)


def take_option(url: str, options: dict[str, Any]) -> tuple[str, int]:
    """`url` without ``max_payload_bytes`` in its query, and the limit it or `options` gave.

    The keyword is taken out of `options`, too (what is left is the
    backend's). The query is otherwise kept byte for byte. Given twice (in
    the query and as a keyword, or twice in the query), or not a whole
    number of at least 1, it is an `InvalidOption`.
    """
    given: list[object] = []
    if OPTION in options:
        given.append(options.pop(OPTION))
    address, mark, rest = url.partition("?")
    if mark and OPTION in rest:
        query, hash_mark, fragment = rest.partition("#")
        kept = []
        for pair in query.split("&"):
            name, _, value = pair.partition("=")
            if name == OPTION:
                given.append(value)
            else:
                kept.append(pair)
        url = address + ("?" + "&".join(kept) if kept else "") + hash_mark + fragment
    if len(given) > 1:
        raise InvalidOption(f"option {OPTION!r} is given twice")
    if not given:
        return url, DEFAULT_MAX_PAYLOAD_BYTES
    return url, positive_int(OPTION, given[0])
