"""A backend's options, from keyword arguments or a URL's query string: the checks they share.

A backend names a parser per option (`positive_int`, `duration`, or its
own) and reads what it was given with `parse_options`, so every backend
says the same thing about the same mistake. In a URL every value is text:
a duration is a number of seconds, a count its digits; as keywords, a
duration may also be a `timedelta`. Each parser takes the option's name
(for the error) and the value, and returns the value the backend keeps or
raises `InvalidOption` naming the option.

`refuse_unknown` says the same for options given as keywords elsewhere
(``Task.using``, `register_task`, `ExponentialBackoff`): an unknown one is
an `InvalidOption` listing the valid ones, not Python's bare `TypeError`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, TypeAlias

from threadmill_core.errors import InvalidOption
from threadmill_core.models import validate_timedelta

#: Reads one option: its name and the value given; returns the value kept.
OptionParser: TypeAlias = Callable[[str, object], object]


def positive_int(name: str, value: object) -> int:
    """An int of at least 1, from an int or (in a URL) its digits."""
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            raise InvalidOption(f"{name} must be a whole number, got {value!r}") from None
    if type(value) is not int or value < 1:
        raise InvalidOption(f"{name} must be an int of at least 1, got {value!r}")
    return value


def duration(name: str, value: object) -> timedelta:
    """A duration of at least a millisecond, from a timedelta or seconds (in a URL, as text).

    NaN, the infinities and numbers past `timedelta`'s range are refused too.
    """
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise InvalidOption(f"{name} must be a number of seconds, got {value!r}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidOption(f"{name} must be a finite number of seconds, got {value!r}")
    try:
        delta = validate_timedelta(name, value)
    except OverflowError:
        raise InvalidOption(f"{name} is out of range, got {value!r}") from None
    if delta < timedelta(milliseconds=1):
        raise InvalidOption(f"{name} must be at least a millisecond, got {value!r}")
    return delta


def parse_options(
    parsers: Mapping[str, OptionParser], options: Mapping[str, object], *, backend: str
) -> dict[str, Any]:
    """Each of `options` read by its parser; `InvalidOption` naming any unknown one.

    `backend` names the backend in the message (``"Redis"``), which lists
    the options it knows.
    """
    unknown = sorted(set(options) - set(parsers))
    if unknown:
        raise InvalidOption(
            f"unknown {backend} backend option(s) {', '.join(unknown)}; "
            f"known: {', '.join(sorted(parsers))}"
        )
    return {name: parsers[name](name, value) for name, value in options.items()}


def refuse_unknown(where: str, unknown: Mapping[str, object], valid: tuple[str, ...]) -> None:
    """`InvalidOption` naming the `unknown` options given to `where`, and the `valid` ones."""
    if unknown:
        raise InvalidOption(
            f"unknown {where} option(s) {', '.join(sorted(unknown))}; valid: {', '.join(valid)}"
        )
