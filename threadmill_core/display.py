"""Values shown to people, cut to a readable length with a marker saying how much was cut.

A stored argument may be a megabyte of text (up to the broker's
``max_payload_bytes``); a screen or a log line shows its start, then
``… [N more characters]``. Tools that want the whole value read it as data:
``threadmill show --json``, `Broker.get_result`.
"""

from __future__ import annotations

#: The most characters of one value that ``threadmill show`` and the TUI print.
SHOWN_CHARS = 2_000

#: The most characters of one value in a record's ``repr`` (what a log line or a
#: traceback shows).
REPR_CHARS = 200


def cut(text: str, limit: int, hint: str = "") -> str:
    """`text` if at most `limit` characters, else its first `limit` and a marker.

    The marker says how many characters were cut, then `hint` (where to see
    them all): ``…[1,048,476 more characters; --json shows all]``.
    """
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…[{len(text) - limit:,} more characters{hint}]"


def short_repr(value: object) -> str:
    """``repr(value)`` cut to `REPR_CHARS` (see `cut`): for reprs of records and errors."""
    return cut(repr(value), REPR_CHARS)
