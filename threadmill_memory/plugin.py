"""The plugin serving ``memory://`` URLs, found through the ``threadmill`` entry points.

``memory://`` takes no host or path. Options, in the URL's query or as
keyword options to `connect` (each at most once, in one place):

- ``result_ttl``: how long results stay readable, positive; seconds in the
  URL (``memory://?result_ttl=3600``), a timedelta or seconds as a keyword.
- ``clock``: a `threadmill_core.clock.Clock`, keyword only (a `FakeClock`
  in tests).

Every URL builds a new, empty backend: two connections to ``memory://`` do
not share tasks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from threadmill_core.backend import Backend
from threadmill_core.clock import Clock
from threadmill_core.errors import InvalidOption
from threadmill_core.hookspecs import BackendScheme, hookimpl
from threadmill_core.models import validate_timedelta

if TYPE_CHECKING:
    from threadmill_memory.backend import MemoryBackend

SCHEME = "memory"
#: Options the URL's query may carry, and options `connect` may pass as keywords.
URL_OPTIONS = frozenset({"result_ttl"})
KEYWORD_OPTIONS = frozenset({"result_ttl", "clock"})
VALID = "memory:// options: result_ttl (seconds in the URL, or a keyword), clock (keyword only)"


@hookimpl
def threadmill_backend_schemes() -> list[BackendScheme]:
    return [
        BackendScheme(SCHEME, "in this process's memory, for tests and development; not durable")
    ]


@hookimpl
def threadmill_backend_for_url(url: str, scheme: str, options: Mapping[str, Any]) -> Backend | None:
    if scheme != SCHEME:
        return None
    return backend_from_url(url, options)


def backend_from_url(url: str, options: Mapping[str, Any]) -> MemoryBackend:
    """Build a `MemoryBackend`; raises `InvalidOption` for anything unknown or malformed."""
    parts = urlsplit(url)
    if parts.netloc or parts.path or parts.fragment:
        raise _invalid(f"{url!r}: memory:// takes no host or path, as in memory://?result_ttl=60")
    given: dict[str, object] = {}
    # keep_blank_values: "?result_ttl" must fail as a bad value, not vanish.
    for name, text in parse_qsl(parts.query, keep_blank_values=True):
        if name not in URL_OPTIONS:
            raise _invalid(f"unknown option {name!r} in {url!r}")
        if name in given:
            raise _invalid(f"option {name!r} appears twice in {url!r}")
        given[name] = _seconds(name, text)
    for name, value in options.items():
        if name not in KEYWORD_OPTIONS:
            raise _invalid(f"unknown option {name!r}")
        if name in given:
            raise _invalid(f"option {name!r} is given both in the URL and as a keyword")
        given[name] = value

    # Here, not at the top: every connect loads this plugin, whatever the URL's scheme.
    from threadmill_memory.backend import MemoryBackend

    clock = given.get("clock")
    if clock is not None and not isinstance(clock, Clock):
        raise _invalid(f"option 'clock' must be a Clock (an object with now()), got {clock!r}")
    if "result_ttl" not in given:
        return MemoryBackend(clock=clock)
    return MemoryBackend(clock=clock, result_ttl=_result_ttl(given["result_ttl"]))


def _invalid(message: str) -> InvalidOption:
    return InvalidOption(f"{message} ({VALID})")


def _seconds(name: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise _invalid(f"option {name!r} must be a number of seconds, got {text!r}") from None


def _result_ttl(value: object) -> timedelta:
    # validate_timedelta does not expect NaN, infinities or numbers past timedelta's range.
    if isinstance(value, float) and not math.isfinite(value):
        raise _invalid(f"option 'result_ttl' must be a finite number of seconds, got {value!r}")
    try:
        return validate_timedelta("option 'result_ttl'", value)
    except InvalidOption as exc:
        raise _invalid(str(exc)) from exc
    except OverflowError as exc:
        raise _invalid(f"option 'result_ttl' is out of range, got {value!r}") from exc
