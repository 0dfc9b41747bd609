"""Payload fidelity: values that must come back value for value from every read."""

from __future__ import annotations

import math
from datetime import timedelta

from threadmill_core.models import (
    JSON,
)
from threadmill_core.testing._scenarios.kit import (
    LEASE_TTL,
    READY,
    Scenario,
    claim_one,
    expect,
    failed,
    new_task,
    registering,
    succeeded,
)
from threadmill_core.testing.harness import Harness
from threadmill_core.testing.model import same_value
from threadmill_core.values import MAX_DEPTH

#: This module's scenarios, by name (`threadmill_core.testing.scenarios.SCENARIOS` holds all).
SCENARIOS: dict[str, Scenario] = {}
scenario = registering(SCENARIOS)

#: Headers as `threadmill_core.tracing` stores them (W3C trace context), and one more.
HEADERS = {
    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "tracestate": "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7",
    "x-tenant": "ünïcode välue",
}


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


@scenario
def headers_are_kept_through_every_transition(harness: Harness) -> None:
    """A task's headers come back unchanged from enqueue, claims, retry, complete, requeue, get.

    And a task enqueued without headers reads as an empty mapping everywhere.
    """
    backend = harness.backend

    def same(where: str, record: object) -> None:
        got = getattr(record, "headers", "<no record>")
        expect(got == HEADERS, f"{where} changed the task's headers", HEADERS, got)

    template = new_task("template", headers=dict(HEADERS))
    [stored, other] = backend.enqueue_calls(template, [("h", [1], {}), ("h2", [], {})])
    same("enqueue_calls()", stored)
    same("enqueue_calls() (its second call)", other)
    backend.enqueue([new_task("plain", queue="other")])
    lease = claim_one(backend, "h")
    same("claim()", lease.record)
    second = claim_one(backend, "h2")
    same("claim() (the second call)", second.record)
    same("complete() (the second call)", backend.complete(second, succeeded(second)))
    same("retry()", backend.retry(lease, failed(lease), timedelta(0)))
    lease = claim_one(backend, "h")
    same("claim() after retry()", lease.record)
    expect(lease.record.attempts == 2, "claim() after retry() is a second attempt")
    same("complete()", backend.complete(lease, failed(lease)))
    same("get() of a FAILED task", backend.get("h"))
    requeued = backend.requeue("h")
    expect(requeued is not None and requeued.status is READY, "requeue() of a FAILED task")
    same("requeue()", requeued)
    lease = claim_one(backend, "h")
    same("claim() after requeue()", lease.record)
    same("complete() after requeue()", backend.complete(lease, succeeded(lease, 1)))
    same("get()", backend.get("h"))
    got = getattr(backend.get("plain"), "headers", "<no record>")
    expect(got == {}, "get() of a task without headers must give an empty mapping", {}, got)
    [single] = backend.enqueue([new_task("one", headers=dict(HEADERS))])
    same("enqueue()", single)
    leases = backend.claim(["default"], worker="w1", lease_ttl=LEASE_TTL, limit=10)
    for lease in leases:
        if lease.task_id == "one":
            same("claim() of an enqueue()d task", lease.record)
        else:
            expect(lease.record.headers == {}, "claim() gave headers to a task without any")
