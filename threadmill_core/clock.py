"""Clocks. The protocol has one clock: the backend's.

Backends take a `Clock`, so the in-memory backend can run on `FakeClock` and
tests can make retries due and leases expire without sleeping. Times in the
protocol have millisecond resolution: every timestamp a backend stores is a
whole number of milliseconds since the Unix epoch, in UTC.
"""

from __future__ import annotations

import functools
import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@runtime_checkable
class Clock(Protocol):
    """Something that tells the time as an aware UTC datetime."""

    def now(self) -> datetime: ...


class SystemClock:
    """The machine's wall clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def __repr__(self) -> str:
        return "SystemClock()"


class FakeClock:
    """A clock that moves only when told to; thread-safe.

    >>> clock = FakeClock()
    >>> before = clock.now()
    >>> clock.advance(timedelta(minutes=5))
    >>> clock.now() - before
    datetime.timedelta(seconds=300)
    """

    def __init__(self, start: datetime | None = None) -> None:
        start = start if start is not None else datetime(2030, 1, 1, tzinfo=UTC)
        if start.tzinfo is None:
            raise ValueError("FakeClock needs an aware datetime, got a naive one")
        self._now = start.astimezone(UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, delta: timedelta | float) -> None:
        """Move the clock forward by `delta` (a timedelta, or seconds)."""
        if not isinstance(delta, timedelta):
            delta = timedelta(seconds=delta)
        if delta < timedelta(0):
            raise ValueError(f"a clock only moves forward; got {delta}")
        with self._lock:
            self._now += delta

    def __repr__(self) -> str:
        return f"FakeClock({self.now().isoformat()})"


def to_ms(moment: datetime) -> int:
    """Milliseconds since the epoch for an aware datetime (sub-millisecond part dropped)."""
    if moment.tzinfo is None:
        raise ValueError(f"naive datetime {moment!r}: threadmill needs aware datetimes")
    return (moment - EPOCH) // timedelta(milliseconds=1)


@functools.lru_cache(maxsize=4096)
def from_ms(ms: int) -> datetime:
    """The aware UTC datetime `ms` milliseconds after the epoch.

    Cached: a batch of records read back from a backend shares a few
    timestamps (one claim's `now()`, one enqueue's), and datetimes are
    immutable.
    """
    return EPOCH + timedelta(0, 0, 0, ms)  # (days, seconds, µs, ms): no keywords to parse


def duration_ms(delta: timedelta) -> int:
    """A duration in whole milliseconds, rounded up so a delay is never shortened."""
    return -(-delta // timedelta(microseconds=1) // 1000)
