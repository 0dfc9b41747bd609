"""Bad `limit` and `offset` values: every backend refuses them with `ValueError`, changing nothing.

A `limit` must be an int from 1 and an `offset` an int from 0, each up to
`MAX_COUNT`; a bool or a str of digits is neither, though Python compares
``True`` with 1 and some drivers would send ``"1"`` as it is, and a count
past `MAX_COUNT` overflows some store's arithmetic (PostgreSQL's bigint,
Lua's numbers) into an error of the store's instead. `ARGUMENT_CASES` holds
one case per such call, each a plain function of a fresh `Harness`, as
`BAD_INPUT_CASES` are; `ConformanceSuite` runs them on every backend.
`threadmill_core.checks.check_limit` and `check_offset` are the checks
that pass them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from threadmill_core.backend import MAX_COUNT, Backend
from threadmill_core.models import TaskResult, TaskResultStatus
from threadmill_core.testing.harness import Harness
from threadmill_core.testing.model import ProtocolViolation

_MINUTE = timedelta(minutes=1)
_READY = TaskResultStatus.READY


def _refused(rule: str, call: Callable[[Backend], object]) -> Callable[[Harness], None]:
    """A case: with a READY task stored, `call` must raise `ValueError` and change nothing."""

    def case(harness: Harness) -> None:
        backend = harness.backend
        backend.enqueue([TaskResult(id="ready", task_path="app:work")])

        def state() -> tuple[object, ...]:
            return dict(backend.counts()), backend.get("ready")

        before = state()
        try:
            call(backend)
        except ValueError:
            pass
        else:
            raise ProtocolViolation(f"{rule} must raise ValueError")
        after = state()
        if after != before:
            raise ProtocolViolation(
                f"{rule} raised ValueError but changed the stored state"
                f"\n  expected: {before!r}\n  got:      {after!r}"
            )

    case.__doc__ = f"{rule} raises ValueError and changes nothing."
    return case


def _claim(limit: Any) -> Callable[[Backend], object]:
    return lambda b: b.claim(["default"], worker="w", lease_ttl=_MINUTE, limit=limit)


_CALLS: dict[str, Callable[[Backend], object]] = {
    "claim() with limit True": _claim(True),
    "claim() with limit '1'": _claim("1"),
    "claim() with limit 1.0": _claim(1.0),
    "claim_expired() with limit True": lambda b: b.claim_expired(limit=True, claim_ttl=_MINUTE),
    "claim_expired() with limit '1'": lambda b: b.claim_expired(
        limit="1",  # type: ignore[arg-type]  # the bad argument under test
        claim_ttl=_MINUTE,
    ),
    "promote_due() with limit True": lambda b: b.promote_due(limit=True),
    "promote_due() with limit '1'": lambda b: b.promote_due(limit="1"),  # type: ignore[arg-type]  # under test
    "peek() with limit True": lambda b: b.peek("default", _READY, limit=True),
    "peek() with offset True": lambda b: b.peek("default", _READY, offset=True),
    "peek() with offset '0'": lambda b: b.peek("default", _READY, offset="0"),  # type: ignore[arg-type]  # under test
    "claim() with limit past MAX_COUNT": _claim(MAX_COUNT + 1),
    "claim_expired() with limit 2**63": lambda b: b.claim_expired(limit=2**63, claim_ttl=_MINUTE),
    "promote_due() with limit 2**62": lambda b: b.promote_due(limit=2**62),
    "peek() with limit 2**64": lambda b: b.peek("default", _READY, limit=2**64),
    "peek() with offset past MAX_COUNT": lambda b: b.peek("default", _READY, offset=MAX_COUNT + 1),
}


def _the_largest_counts_are_taken(harness: Harness) -> None:
    """A `limit` and an `offset` of `MAX_COUNT` are taken: they mean "all" and "past the end"."""
    backend = harness.backend
    backend.enqueue([TaskResult(id="ready", task_path="app:work")])
    if backend.peek("default", _READY, offset=MAX_COUNT, limit=MAX_COUNT) != []:
        raise ProtocolViolation("peek() at offset MAX_COUNT must find nothing past the end")
    if [r.id for r in backend.peek("default", _READY, limit=MAX_COUNT)] != ["ready"]:
        raise ProtocolViolation("peek() with limit MAX_COUNT must return the whole segment")
    if backend.promote_due(limit=MAX_COUNT) != 0:
        raise ProtocolViolation("promote_due() with limit MAX_COUNT promoted a task not DEFERRED")
    leases = backend.claim(["default"], worker="w", lease_ttl=_MINUTE, limit=MAX_COUNT)
    if [lease.record.id for lease in leases] != ["ready"]:
        raise ProtocolViolation("claim() with limit MAX_COUNT must take every READY task")
    if backend.claim_expired(limit=MAX_COUNT, claim_ttl=_MINUTE) != []:
        raise ProtocolViolation("claim_expired() with limit MAX_COUNT took a lease not expired")


#: Bad limits and offsets at the storage interface: each raises `ValueError`
#: and changes nothing; and the largest ones, which every backend takes.
ARGUMENT_CASES: dict[str, Callable[[Harness], None]] = {
    **{rule: _refused(rule, call) for rule, call in _CALLS.items()},
    "a limit and an offset of MAX_COUNT are taken": _the_largest_counts_are_taken,
}
