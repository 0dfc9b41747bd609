"""A task's headers: small str-to-str metadata stored with its record, beside the payload.

Headers carry what a producer passes to every attempt without it being an
argument of the task: the W3C trace context of `threadmill_core.tracing`
(``traceparent``, ``tracestate``). They are set at enqueue and never change
afterwards: retries, give-backs and requeues keep them. A record without
any (every record stored before headers existed) has an empty mapping.

Bounds, checked where a record is enqueued (`check_headers`, through
`threadmill_core.codec.check_record`, as its arguments are) and where stored
bytes are read (`threadmill_core.codec`): at most `MAX_HEADERS`
entries; each name a non-empty ASCII str of at most `MAX_NAME_LENGTH`
characters; each value a str of valid Unicode text (no lone surrogate, which
UTF-8 cannot hold); names and values together at most
`MAX_HEADERS_LENGTH` characters. A W3C ``traceparent`` is 55 characters
and its ``tracestate`` is kept to 512 by the propagators, so the bounds
hold trace context with room to spare, never a payload.
"""

from __future__ import annotations

from threadmill_core.display import short_repr
from threadmill_core.errors import UnsupportedValue

#: At most this many headers per task.
MAX_HEADERS = 16
#: A header's name: at most this many characters (ASCII, not empty).
MAX_NAME_LENGTH = 64
#: Every name and value of a task's headers together: at most this many characters.
MAX_HEADERS_LENGTH = 2048


def headers_problem(headers: object) -> str | None:
    """What is wrong with `headers` as a record's headers, in words; None if nothing is."""
    if type(headers) is not dict:
        return f"headers must be a dict of str to str, got {short_repr(headers)}"
    if not headers:
        return None
    if len(headers) > MAX_HEADERS:
        return f"headers hold {len(headers)} entries; at most {MAX_HEADERS} are allowed"
    total = 0
    for name, value in headers.items():
        if type(name) is not str or not name or not name.isascii():
            return f"header name {short_repr(name)} is not a non-empty ASCII str"
        if len(name) > MAX_NAME_LENGTH:
            return f"header name {short_repr(name)} is longer than {MAX_NAME_LENGTH} characters"
        if type(value) is not str:
            return f"header {name!r} must be a str, got {short_repr(value)}"
        if not value.isascii():
            try:
                value.encode()
            except UnicodeEncodeError as exc:  # a lone surrogate: no UTF-8 holds it
                return f"header {name!r} is a str that is not valid Unicode text ({exc.reason})"
        total += len(name) + len(value)
    if total > MAX_HEADERS_LENGTH:
        return (
            f"headers hold {total} characters of names and values; "
            f"at most {MAX_HEADERS_LENGTH} are allowed"
        )
    return None


def check_headers(headers: object) -> None:
    """`UnsupportedValue` naming ``headers`` and what is wrong, unless `headers` are good."""
    problem = headers_problem(headers)
    if problem is not None:
        raise UnsupportedValue("headers", headers, reason=f"are refused: {problem}")
