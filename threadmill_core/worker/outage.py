"""`Outage`: one process's view of backend outages, shared by every loop that calls the backend.

The worker's task threads, its heartbeat and maintenance, and the
supervisor's maintenance loop each report to an `Outage` how their calls
went; it answers how long to wait before the next attempt
(`RECONNECT_BACKOFF` by default) and logs one warning when the backend goes
away and one line when it is back.
"""

from __future__ import annotations

import logging
import random
import threading
import time

from threadmill_core.errors import BackendUnavailable
from threadmill_core.retry import ExponentialBackoff

#: How long to wait between attempts to reach an unavailable backend: 0.1 s,
#: doubling to 5 s, each plus up to half again at random so that the workers
#: of a restarted server do not all come back in the same instant.
RECONNECT_BACKOFF = ExponentialBackoff(
    base_delay=0.1, max_delay=5.0, factor=2.0, max_retries=None, jitter=0.5
)


class Outage:
    """One process's view of backend outages: backoff delays, and one log line each way.

    Every loop that calls the backend reports to the same `Outage`, passing
    the `time.monotonic()` at which its call started: `failed` when the call
    raised `BackendUnavailable` (with how many times in a row that loop has
    failed; the answer is how long to wait before trying again), `reached`
    after it got through. The first failure logs one warning, the first
    success after it one info line saying how long it lasted; calls in
    between log nothing, and no traceback is logged. A call that started
    before an outage and got through after it began does not end it, and one
    that started before the outage ended and failed after it does not start
    another: threads racing at the edges log no extra lines. Thread-safe.
    """

    def __init__(
        self, logger: logging.Logger, backoff: ExponentialBackoff = RECONNECT_BACKOFF
    ) -> None:
        self.log = logger
        self.backoff = backoff
        #: Outages seen so far (each one logged once).
        self.count = 0
        self._lock = threading.Lock()
        self._since: float | None = None
        self._ended = float("-inf")
        self._failures = 0

    @property
    def down(self) -> bool:
        """True from a failure until a call started after it gets through."""
        return self._since is not None

    def failed(self, exc: BackendUnavailable, attempt: int, started: float) -> float:
        """Note a call started at `started` that failed, its loop's `attempt`-th in a row.

        Returns how many seconds that loop should wait before trying again.
        """
        with self._lock:
            self._failures += 1
            if self._since is None and started >= self._ended:
                self._since = started
                self.count += 1
                self.log.warning(
                    "backend unavailable (%s: %s); retrying with backoff, at most %g s apart",
                    type(exc).__name__, exc, self.backoff.max_delay,
                )  # fmt: skip
        delay = self.backoff.delay_for(attempt)
        return delay + delay * self.backoff.jitter * random.random()

    def reached(self, started: float) -> None:
        """Note a call started at `started` that got through; it may end the outage."""
        if self._since is None:  # the common case, nothing wrong: no lock taken
            return
        with self._lock:
            if self._since is None or started < self._since:
                return
            now = time.monotonic()
            self.log.info(
                "backend reachable again after %.1f s (%d failed calls meanwhile)",
                now - self._since, self._failures,
            )  # fmt: skip
            self._since = None
            self._ended = now
            self._failures = 0
