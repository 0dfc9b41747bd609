"""Payload fidelity: values that must come back value for value from every read."""

from __future__ import annotations

import math

from threadmill_core.models import (
    JSON,
)
from threadmill_core.testing._scenarios.kit import (
    claim_one,
    expect,
    new_task,
    succeeded,
)
from threadmill_core.testing.harness import Harness
from threadmill_core.testing.model import same_value
from threadmill_core.values import MAX_DEPTH


def _nested(depth: int) -> JSON:
    """`depth` levels of alternating dicts and lists around a string."""
    value: JSON = "bottom"
    for level in range(depth):
        value = [value] if level % 2 else {"level": value}
    return value


#: Values that must come back value for value (see `same_value`).
PAYLOAD_CASES: dict[str, JSON] = {
    "empty list": [],
    "empty dict": {},
    "2**63 + 1": 2**63 + 1,
    "-2**200": -(2**200),
    "2**53 + 1": 2**53 + 1,
    "0.1": 0.1,
    "pi": math.pi,
    "-0.0": -0.0,
    "inf": math.inf,
    "-inf": -math.inf,
    "nan": math.nan,
    "smallest subnormal": 5e-324,
    "bool is not int": [True, 1, 1.0, False, 0, None],
    "non-ASCII text and emoji": "naïve café — 日本語 — 🚀👩🏽‍🚀",
    "NUL and control characters": "a\x00b\x1f\n\t\u2028",
    "dict key order": {"z": 1, "a": 2, "m": {"y": 3, "b": 4}},
    "empty and non-ASCII keys": {"": 0, "ключ": [], "🔑": {}},
    "deep nesting (the most the codec takes)": _nested(MAX_DEPTH),
    "long string": "threadmill " * 10_000,
    "mixed": {"ints": [0, -1, 2**64], "floats": [1e308, -1e-308], "s": "x", "none": None},
}


def check_payload_round_trip(harness: Harness, value: JSON) -> None:
    """Send `value` through enqueue, claim, complete(return_value) and get; it must not change."""
    backend = harness.backend

    def same(where: str, got: JSON) -> None:
        expect(same_value(value, got), f"{where} changed the value", value, got)

    [stored] = backend.enqueue([new_task("payload", args=[value], kwargs={"value": value})])
    same("enqueue() (args)", stored.args[0] if stored.args else "<no args>")
    same("enqueue() (kwargs)", stored.kwargs.get("value", "<missing>"))
    lease = claim_one(backend, "payload")
    same("claim() (args)", lease.record.args[0] if lease.record.args else "<no args>")
    same("claim() (kwargs)", lease.record.kwargs.get("value", "<missing>"))
    done = backend.complete(lease, succeeded(lease, value))
    expect(done is not None, "complete() refused a current lease")
    assert done is not None
    same("complete() (return_value)", done.return_value)
    got = backend.get("payload")
    expect(got is not None, "get() lost the task")
    assert got is not None
    same("get() (args)", got.args[0] if got.args else "<no args>")
    same("get() (kwargs)", got.kwargs.get("value", "<missing>"))
    same("get() (return_value)", got.return_value)
