"""Hypothesis strategies for the conformance kit.

Values are what the codec carries (`threadmill_core.codec`): None, bool, int
of any size, float (``nan`` and the infinities included), str, and lists and
str-keyed dicts of these. They are kept small (a few leaves) so that a
stateful run stays fast, but varied where backends tend to go wrong: huge
integers, ``-0.0``, non-ASCII text and emoji, NUL characters, empty
containers, dict key order.

Values with ``nan`` are not equal to themselves under ``==``; compare drawn
values with `threadmill_core.testing.model.same_value`.
"""

from __future__ import annotations

import math
from datetime import timedelta

from hypothesis import strategies as st

from threadmill_core.models import (
    JSON,
    MAX_PRIORITY,
    MIN_PRIORITY,
    Progress,
    RetryPolicySpec,
    TaskError,
)

#: Queue names the kit uses. Besides the plain name they carry a colon, a
#: space, non-ASCII text and braces, which key-building code (Redis hash tags)
#: must treat as plain characters.
QUEUE_NAMES: tuple[str, ...] = ("default", "emails:outbound", "rapports ü 🚀 {tag}")

#: Integers around the limits that a backend's number handling tends to break.
EDGE_INTEGERS: tuple[int, ...] = (
    2**31,
    2**53 + 1,
    2**63 - 1,
    2**63 + 1,
    -(2**63) - 1,
    2**64,
    -(2**200),
)

#: Strings that test encodings and binary safety.
EDGE_TEXTS: tuple[str, ...] = ("", "ü", "日本語", "🚀✨", "\x00", "a\nb", '"quoted"', "\\")


#: A few values of every kind the codec carries, edge cases first. The state
#: machine draws payloads from here (one choice each, so failures shrink fast);
#: `json_values` explores further.
SAMPLE_VALUES: tuple[JSON, ...] = (
    None,
    0,
    True,
    -0.0,
    0.1,
    math.pi,
    float("inf"),
    float("nan"),
    2**63 + 1,
    -(2**200),
    "",
    "日本語 🚀",
    "\x00",
    [],
    {},
    [1, [2, [3, []]]],
    {"b": 1, "a": {"z": None, "y": [False]}},
    [{"ü": -1.5e-300}],
)


def sample_values() -> st.SearchStrategy[JSON]:
    """One of `SAMPLE_VALUES`."""
    return st.sampled_from(SAMPLE_VALUES)


def json_scalars(*, allow_nan: bool = True) -> st.SearchStrategy[JSON]:
    """Codec-carriable scalars, with the edge cases weighted in."""
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-3, max_value=3),
        st.integers(),
        st.sampled_from(EDGE_INTEGERS),
        st.floats(allow_nan=allow_nan, allow_infinity=True),
        st.sampled_from((0.1, -0.0, math.pi, 1e308, 5e-324)),
        st.text(max_size=6),
        st.sampled_from(EDGE_TEXTS),
    )


def json_values(*, allow_nan: bool = True, max_leaves: int = 6) -> st.SearchStrategy[JSON]:
    """Codec-carriable values: scalars, and lists and str-keyed dicts of them.

    Dicts come in whatever key order they were drawn in; that order is part of
    the value (`model.same_value` checks it).
    """
    return st.recursive(
        json_scalars(allow_nan=allow_nan),
        lambda children: st.one_of(
            st.lists(children, max_size=3),
            st.dictionaries(st.text(max_size=4), children, max_size=3),
        ),
        max_leaves=max_leaves,
    )


def task_args() -> st.SearchStrategy[list[JSON]]:
    """Positional arguments of a task: a short list of `SAMPLE_VALUES`."""
    return st.lists(sample_values(), max_size=2)


def task_kwargs() -> st.SearchStrategy[dict[str, JSON]]:
    """Keyword arguments of a task: a small dict of `SAMPLE_VALUES`, keys in drawn order."""
    return st.dictionaries(st.sampled_from(("when", "to", "ключ", "")), sample_values(), max_size=2)


def queue_names() -> st.SearchStrategy[str]:
    """One of `QUEUE_NAMES`."""
    return st.sampled_from(QUEUE_NAMES)


def priorities() -> st.SearchStrategy[int]:
    """Task priorities in range, mostly from a few values so that ties (FIFO) are common."""
    return st.one_of(
        st.sampled_from((0, 0, 1, -1, MIN_PRIORITY, MAX_PRIORITY)),
        st.integers(min_value=MIN_PRIORITY, max_value=MAX_PRIORITY),
    )


def task_paths() -> st.SearchStrategy[str]:
    """Import paths of task functions (``module:qualname``); never imported by the kit."""
    return st.sampled_from(("app.tasks:send_email", "app.reports:Report.render", "ü.tâches:é"))


def worker_names() -> st.SearchStrategy[str]:
    """Worker ids as a worker would report them."""
    return st.sampled_from(("host-1:4242", "host-2:17", "wörker-🚀"))


def task_errors() -> st.SearchStrategy[TaskError]:
    """One recorded failure of a task."""
    return st.builds(
        TaskError,
        exception_class_path=st.sampled_from(
            (
                "builtins.ValueError",
                "threadmill_core.errors.AcknowledgementTimeout",
                "app.errors.Ünicode",
            )
        ),
        message=st.sampled_from(EDGE_TEXTS),
        traceback=st.sampled_from(("", 'Traceback (most recent call last):\n  File "x.py"\n')),
    )


def task_headers() -> st.SearchStrategy[dict[str, str]]:
    """A record's headers: none (most records), W3C trace context, or a few of any text."""
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    return st.one_of(
        st.just({}),
        st.just({"traceparent": traceparent}),
        st.dictionaries(
            st.text(alphabet="abcdefghijklmnopqrstuvwxyz-_0123456789", min_size=1, max_size=12),
            st.text(max_size=40),
            max_size=3,
        ),
    )


def retry_specs() -> st.SearchStrategy[RetryPolicySpec | None]:
    """A stored retry policy reference, or none."""
    return st.one_of(
        st.none(),
        st.builds(
            RetryPolicySpec,
            path=st.just("threadmill_core.retry:ExponentialBackoff"),
            options=st.one_of(st.none(), st.just({"base": 0.5, "max_attempts": 2**63 + 1})),
        ),
    )


def time_limits() -> st.SearchStrategy[timedelta | None]:
    """A record's time limit: none (most records), whole seconds, or a fraction of a
    millisecond (stored rounded up to whole milliseconds)."""
    return st.sampled_from(
        (
            None,
            None,
            timedelta(seconds=30),
            timedelta(milliseconds=1500),
            timedelta(microseconds=2500),
        )
    )


@st.composite
def progresses(draw: st.DrawFn) -> Progress:
    """A progress report as a task makes it: ints or floats, a total or none, a message
    or none (non-ASCII and the longest allowed included)."""
    total = draw(st.one_of(st.none(), st.integers(1, 10**6), st.floats(0.5, 1e6)))
    ceiling = 10**6 if total is None else total
    if isinstance(ceiling, int):
        done: int | float = draw(st.integers(0, ceiling))
    else:
        done = draw(st.floats(0.0, ceiling))
    message = draw(st.sampled_from((None, "", "copying files", "ünïcode 🚀", "m" * 1_000)))
    return Progress(done=done, total=total, message=message)
