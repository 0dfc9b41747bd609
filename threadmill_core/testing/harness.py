"""How the conformance kit drives a backend: a backend plus a way to move its clock."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import attrs

from threadmill_core.backend import Backend


def _nothing() -> None:
    return None


@attrs.define(kw_only=True)
class Harness:
    """A fresh, empty backend under test and the controls the kit needs.

    `advance(delta)` must make the backend behave as if its clock moved
    forward by `delta`: leases that were due to expire within `delta`
    expire, deferred tasks become due. A backend on an injected clock just
    advances it; one on a server clock (Redis's ``TIME``) may instead shift
    its stored deadlines and due times back by `delta` from test-support
    code.

    `exact_clock` says whether the backend's timestamps follow the kit's
    model clock exactly (an injected fake clock starting at `start`). When
    False the kit checks timestamps only for presence and order.

    `close()` releases the backend and anything it stored.
    """

    backend: Backend
    advance: Callable[[timedelta], None]
    exact_clock: bool = False
    close: Callable[[], None] = _nothing

    #: The result retention the backend was built with; the kit never advances
    #: the clock past it, so terminal tasks stay visible.
    result_ttl: timedelta = timedelta(days=7)


#: Builds a fresh Harness; the kit calls it once per test case.
HarnessFactory = Callable[[], Harness]
