"""The counters under `MemoryBackend.rates`: per queue, per time bucket, bounded.

Nothing here knows the protocol. The backend calls `RateHistory.record` with
its own clock reading, under its lock, in the same step as the state change
being counted; the history forgets buckets older than its length, so each
queue holds at most ``history_ms / bucket_ms`` buckets however busy it is.
"""

from __future__ import annotations

import collections
from datetime import timedelta

from threadmill_core.clock import duration_ms

#: One bucket: its index (milliseconds since the epoch // bucket length), entered, finished.
Bucket = list[int]


class RateHistory:
    """Tasks entered and finished per queue, in buckets of `bucket` over the last `history`."""

    def __init__(self, *, bucket: timedelta, history: timedelta) -> None:
        self._bucket_ms = duration_ms(bucket)
        self._history = history
        self._length = -(-duration_ms(history) // self._bucket_ms)  # buckets kept per queue
        self._queues: dict[str, collections.deque[Bucket]] = {}

    def record(self, queue: str, now_ms: int, *, entered: int = 0, finished: int = 0) -> None:
        """Add to the bucket holding `now_ms`; `now_ms` never goes back (the backend's clock)."""
        index = now_ms // self._bucket_ms
        buckets = self._queues.setdefault(queue, collections.deque())
        if buckets and buckets[-1][0] == index:
            buckets[-1][1] += entered
            buckets[-1][2] += finished
        else:
            buckets.append([index, entered, finished])
        while buckets[0][0] <= index - self._length:
            buckets.popleft()

    def window(
        self, now_ms: int, window: timedelta
    ) -> tuple[timedelta, dict[str, tuple[int, int]]]:
        """The span covered and (entered, finished) per queue over the last `window`.

        The window is the bucket holding `now_ms` and the ones before it, back
        over `window` rounded up to whole buckets, at most the whole history.
        Queues with nothing in it are left out; queues with nothing left in
        the history are forgotten.
        """
        current = now_ms // self._bucket_ms
        count = min(-(-duration_ms(window) // self._bucket_ms), self._length)
        totals: dict[str, tuple[int, int]] = {}
        for queue, buckets in list(self._queues.items()):
            while buckets and buckets[0][0] <= current - self._length:
                buckets.popleft()
            if not buckets:
                del self._queues[queue]
                continue
            entered = finished = 0
            for index, added, done in reversed(buckets):
                if index <= current - count:
                    break
                entered += added
                finished += done
            if entered or finished:
                totals[queue] = (entered, finished)
        return min(window, self._history), totals
