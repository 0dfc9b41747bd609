"""The plugin serving ``sqlite://`` URLs, found through the ``threadmill`` entry points.

URL forms (everything after ``sqlite://`` up to ``?`` is the file's path,
percent-decoded)::

    sqlite:///var/lib/app/queue.db     absolute: /var/lib/app/queue.db
    sqlite://queue.db                  relative to the working directory of the
    sqlite://data/queue.db             process that connects (made absolute then)

The file and its tables are created if missing; its folder must exist.
``sqlite://`` alone, ``:memory:`` and ``file:`` URIs are refused: an
in-memory database cannot be shared between connections (use ``memory://``).

Options, in the URL's query or as keyword options to `connect` (each at most
once, in one place):

- ``result_ttl``: how long results stay readable, positive; seconds in the
  URL (``sqlite:///q.db?result_ttl=3600``), a timedelta or seconds as a keyword.
- ``busy_timeout``: how long an operation waits for another process's write
  lock, positive; seconds in the URL, a timedelta or seconds as a keyword.
- ``synchronous``: ``full`` (the default: a state change that returned
  survives a power loss) or ``normal`` (it survives the process being
  killed; far fewer disk flushes). See `SQLiteBackend`.

Anything else, or a malformed value, raises `InvalidOption` naming it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlsplit

from threadmill_core.backend import Backend
from threadmill_core.errors import InvalidOption
from threadmill_core.hookspecs import BackendScheme, hookimpl
from threadmill_core.models import validate_timedelta

if TYPE_CHECKING:
    from threadmill_sqlite.backend import SQLiteBackend

SCHEME = "sqlite"
#: Options that take seconds in the URL and a timedelta or seconds as a keyword.
DURATIONS = frozenset({"result_ttl", "busy_timeout"})
OPTIONS = DURATIONS | {"synchronous"}
VALID = (
    "sqlite:// URLs look like sqlite:///abs/path.db or sqlite://relative/path.db; "
    "options: result_ttl, busy_timeout (seconds in the URL, or keywords), "
    "synchronous (full or normal)"
)


@hookimpl
def threadmill_backend_schemes() -> list[BackendScheme]:
    return [
        BackendScheme(
            SCHEME, "one SQLite file shared by the processes of one machine, no server (WAL)"
        )
    ]


@hookimpl
def threadmill_backend_for_url(url: str, scheme: str, options: Mapping[str, Any]) -> Backend | None:
    if scheme != SCHEME:
        return None
    return backend_from_url(url, options)


def backend_from_url(url: str, options: Mapping[str, Any]) -> SQLiteBackend:
    """Build a `SQLiteBackend`; raises `InvalidOption` for anything unknown or malformed.

    Opening the file can also fail (a missing folder, a file that is not a
    database): that is a `threadmill_sqlite.errors.SQLiteBackendError`.
    """
    # Here, not at the top: threadmill loads this plugin on every connect, whatever the URL.
    from threadmill_sqlite._database import SYNCHRONOUS
    from threadmill_sqlite.backend import SQLiteBackend

    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise _invalid(f"{url!r} is not a valid URL: {exc}") from None
    if parts.scheme.lower() != SCHEME:
        raise _invalid(f"{url!r} is not a sqlite:// URL")
    if parts.fragment:
        raise _invalid(f"{url!r} has a fragment (#...); a '#' in the path is written %23")
    path = unquote(parts.netloc + parts.path)
    if not path:
        raise _invalid(f"{url!r} names no database file")
    if path == ":memory:" or path.startswith("file:"):
        raise _invalid(
            f"{url!r}: an in-memory database cannot be shared between connections; "
            "use memory:// for a private queue"
        )
    given: dict[str, object] = {}
    # keep_blank_values: "?result_ttl" must fail as a bad value, not vanish.
    for name, text in parse_qsl(parts.query, keep_blank_values=True):
        if name not in OPTIONS:
            raise _invalid(f"unknown option {name!r} in {url!r}")
        if name in given:
            raise _invalid(f"option {name!r} appears twice in {url!r}")
        given[name] = _seconds(name, text) if name in DURATIONS else text
    for name, value in options.items():
        if name not in OPTIONS:
            raise _invalid(f"unknown option {name!r}")
        if name in given:
            raise _invalid(f"option {name!r} is given both in the URL and as a keyword")
        given[name] = value
    synchronous = given.pop("synchronous", "full")
    if not isinstance(synchronous, str) or synchronous not in SYNCHRONOUS:
        raise _invalid(f"option 'synchronous' must be full or normal, got {synchronous!r}")
    durations = {name: _duration(name, value) for name, value in given.items()}
    return SQLiteBackend(path, synchronous=synchronous, **durations)


def _invalid(message: str) -> InvalidOption:
    return InvalidOption(f"{message} ({VALID})")


def _seconds(name: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise _invalid(f"option {name!r} must be a number of seconds, got {text!r}") from None


def _duration(name: str, value: object) -> timedelta:
    # validate_timedelta does not expect NaN, infinities or numbers past timedelta's range.
    if isinstance(value, float) and not math.isfinite(value):
        raise _invalid(f"option {name!r} must be a finite number of seconds, got {value!r}")
    try:
        return validate_timedelta(f"option {name!r}", value)
    except InvalidOption as exc:
        raise _invalid(str(exc)) from exc
    except OverflowError as exc:
        raise _invalid(f"option {name!r} is out of range, got {value!r}") from exc
