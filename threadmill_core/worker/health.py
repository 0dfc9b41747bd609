"""Whether a backend answers: ``/readyz`` (`Readiness`) and ``threadmill health`` (`check`).

The question is one cheap call (`Backend.now`: Redis ``TIME``, PostgreSQL
``SELECT now()``) with a short timeout, made in a thread of its own so that a
backend that hangs cannot hang the asker. At most one such call is in
flight at once: while one hangs, the answer is that it has not answered.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from threadmill_core.urls import redact

if TYPE_CHECKING:
    from threadmill_core.backend import Backend

#: How long a backend may take to answer before it is not ready.
READY_TIMEOUT = 2.0
#: How long an answer holds, so that probes arriving together make one call.
READY_CACHE = 1.0


class _Call:
    """One call in a thread of its own: its error (None: it answered), once it has ended."""

    def __init__(self, call: Callable[[], object]) -> None:
        self.started = time.monotonic()
        self.error: str | None = None
        self._thread = threading.Thread(target=self._run, args=(call,), daemon=True,
                                        name="threadmill-health")  # fmt: skip
        self._thread.start()

    def _run(self, call: Callable[[], object]) -> None:
        try:
            call()
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"

    def wait(self, timeout: float) -> bool:
        """Whether the call has ended, waiting up to `timeout` seconds."""
        self._thread.join(max(timeout, 0.0))
        return not self._thread.is_alive()


class Readiness:
    """``/readyz``'s answer for one backend: None when it answers, else why not.

    Thread-safe; an answer is reused for `READY_CACHE` seconds.
    """

    def __init__(self, backend: Backend, timeout: float = READY_TIMEOUT) -> None:
        self._backend = backend
        self._timeout = timeout
        self._lock = threading.Lock()
        self._call: _Call | None = None
        self._answer: str | None = None
        self._answered_at = float("-inf")

    def problem(self) -> str | None:
        with self._lock:
            now = time.monotonic()
            if now - self._answered_at < READY_CACHE:
                return self._answer
            if self._call is None:  # else the last one still hangs: wait on it, start none
                self._call = _Call(self._backend.now)
            call = self._call
            if call.wait(call.started + self._timeout - now):
                self._call = None
                self._answer = None if call.error is None else f"the backend failed: {call.error}"
            else:
                waited = time.monotonic() - call.started
                self._answer = f"the backend has not answered in {waited:.1f} s"
            self._answered_at = time.monotonic()
            return self._answer


def check(url: str, timeout: float) -> str | None:
    """Connect to `url` and ask the backend the time, all within `timeout` seconds; None when
    it answered, else one line saying what went wrong (the URL's password hidden).

    It makes nothing: a backend whose storage is missing (a PostgreSQL namespace
    not created yet, or misspelt) is a problem naming it, as the inspecting
    commands say, not a schema created by a probe.
    """
    from threadmill_core.plugins import backend_for_url

    def ask() -> None:
        backend = backend_for_url(url, {}, create=False)
        try:
            backend.now()
        finally:
            backend.close()

    call = _Call(ask)
    if not call.wait(timeout):
        return f"{redact(url)}: no answer within {timeout:g} s"
    if call.error is not None:
        return f"{redact(url)}: {call.error}"
    return None
