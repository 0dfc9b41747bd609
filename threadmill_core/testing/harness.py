"""How the conformance kit drives a backend: a backend plus a way to move its clock."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta

import attrs

from threadmill_core.backend import Backend
from threadmill_core.clock import FakeClock

#: The result retention `on_fake_clock` assumes unless told otherwise.
DEFAULT_RESULT_TTL = timedelta(days=7)


def _nothing() -> None:
    return None


@attrs.define(kw_only=True)
class Harness:
    """A fresh, empty backend under test and the controls the kit needs.

    `advance(delta)` must make the backend behave as if its clock had moved
    forward by `delta`: every lease whose deadline falls within `delta`
    expires, every deferred task due within it falls due, and finished
    results age toward `result_ttl`. It moves scheduling, not history: the
    timestamps already stored in records (`enqueued_at`, `started_at`,
    `run_after`, `finished_at`, ...) must read the same afterwards. A backend
    that takes an injected clock just advances a `FakeClock` (see
    `on_fake_clock`). One on a clock the test cannot set (a database or
    server clock) needs test-support code instead: a subclass whose one
    clock-reading method adds an offset that `advance` grows, or a routine
    that moves the stored deadlines, due times and expiry times back by
    `delta` (what the Redis backend's test support does).

    `exact_clock` says whether the backend's clock moves only through
    `advance`, so that the kit can predict every timestamp to the
    millisecond. When False (a real clock, which also creeps forward while
    the test runs) the kit checks timestamps only for presence and order,
    accepts either order for two tasks stamped at one model instant, and
    keeps every time step at least a minute from any boundary.

    `close()` releases the backend and anything it stored; the kit calls it
    once per harness, after the last call on the backend.

    `result_ttl` must be the retention the backend was built with; the kit
    never advances the clock past it, so terminal tasks stay visible.

    `corruptions` are named ways to damage the stored record of the task
    with the given id, as a crash, a bug or a hand edit could ("state
    missing", "state garbled", "payload garbled", ...), each a function of
    the id. The kit's corrupt-record scenarios damage one task per
    corruption beside good ones in every segment, and insist that each
    corrupt one is quarantined FAILED (or, where no record is left to mark,
    gone) and that its neighbours are processed as if it were not there. A
    backend that cannot hold a corrupt record leaves this empty.
    """

    backend: Backend
    advance: Callable[[timedelta], None]
    exact_clock: bool = False
    close: Callable[[], None] = _nothing
    result_ttl: timedelta = DEFAULT_RESULT_TTL
    #: Named ways to damage the stored record of the task with the given id, as
    #: a crash, a bug or a hand edit could ("payload garbled", "timestamp out of
    #: range", ...); the kit's corrupt-record scenarios use those a backend offers.
    corruptions: Mapping[str, Callable[[str], None]] = attrs.field(factory=dict)


#: Builds a fresh Harness (an empty backend); the kit calls it once per test case.
HarnessFactory = Callable[[], Harness]


def on_fake_clock(
    build: Callable[[FakeClock], Backend], *, result_ttl: timedelta = DEFAULT_RESULT_TTL
) -> HarnessFactory:
    """A `HarnessFactory` for a backend that takes an injected clock.

    Each harness gets a new `FakeClock` and the backend `build(clock)` makes
    on it, which must keep results for `result_ttl`; `advance` moves the
    clock, `exact_clock` is True and `close` calls the backend's `close`::

        on_fake_clock(lambda clock: MyBackend(clock=clock, result_ttl=TTL), result_ttl=TTL)
    """

    def factory() -> Harness:
        clock = FakeClock()
        backend = build(clock)
        return Harness(
            backend=backend,
            advance=clock.advance,
            exact_clock=True,
            close=backend.close,
            result_ttl=result_ttl,
        )

    # Named after `build`: the state machine's failure report names its class after this.
    factory.__name__ = factory.__qualname__ = f"on_fake_clock({getattr(build, '__name__', '')})"
    return factory
