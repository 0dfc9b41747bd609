"""Bad input at the storage interface: each case makes one bad call, which must raise and
change nothing."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import attrs

from threadmill_core.backend import Backend
from threadmill_core.checks import MAX_WAIT
from threadmill_core.errors import UnsupportedValue
from threadmill_core.models import (
    Decision,
    Lease,
    Progress,
    RetryPolicySpec,
    TaskResultStatus,
)
from threadmill_core.testing._scenarios.kit import (
    CLAIM_TTL,
    DEFERRED,
    LEASE_TTL,
    PAST_A_LEASE,
    READY,
    RUNNING,
    Scenario,
    claim_one,
    expect,
    failed,
    new_task,
    snapshot,
    succeeded,
)
from threadmill_core.testing.harness import Harness
from threadmill_core.testing.model import ProtocolViolation


def _busy(harness: Harness) -> Lease:
    """Fill a backend with a READY task, a due DEFERRED task and a RUNNING task whose
    lease expired (so a bad call has something to wrongly touch); return that lease."""
    backend = harness.backend
    backend.enqueue(
        [
            new_task("running"),
            new_task("ready"),
            new_task("due", run_after=backend.now() + timedelta(minutes=1)),
        ]
    )
    lease = claim_one(backend, "running")
    harness.advance(PAST_A_LEASE)
    return lease


BadCall = Callable[[Backend, Lease], object]


def _refused(rule: str, error: type[Exception], call: BadCall) -> Scenario:
    """A bad-input case: on a busy backend, `call` must raise `error` and change nothing."""

    def case(harness: Harness) -> None:
        lease = _busy(harness)
        before = snapshot(harness.backend)
        try:
            call(harness.backend, lease)
        except error:
            pass
        else:
            raise ProtocolViolation(f"{rule} must raise {error.__name__}")
        after = snapshot(harness.backend)
        expect(
            after == before,
            f"{rule} raised {error.__name__} but changed the stored state",
            before,
            after,
        )

    case.__doc__ = f"{rule} raises {error.__name__} and changes nothing."
    return case


def _claim(queues: Any = ("default",), **arguments: Any) -> BadCall:
    """A `claim` with good arguments except those given."""
    options = {"worker": "w", "lease_ttl": LEASE_TTL, **arguments}
    return lambda b, _: b.claim(queues, **options)


def _complete_as(status: TaskResultStatus) -> BadCall:
    """A `complete` that asks for `status`."""
    return lambda b, lease: b.complete(lease, attrs.evolve(lease.record, status=status))


def _decide_many_ending_with(bad: Callable[[Lease], Decision]) -> BadCall:
    """A batch whose first decision is fine: the whole batch must be refused before it starts."""
    return lambda b, lease: b.decide_many(
        [Decision(lease=lease, record=succeeded(lease)), bad(lease)]
    )


#: A ttl or delay longer than a backend takes: its deadline or due time would be past
#: what a `datetime` holds (year 9999) for the next several thousand years.
PAST_MAX_WAIT = MAX_WAIT + timedelta(days=1)

_BAD_CALLS: dict[str, tuple[type[Exception], BadCall]] = {
    "claim() with limit 0": (ValueError, _claim(limit=0)),
    "claim() with a negative limit": (ValueError, _claim(limit=-1)),
    "claim() with a zero lease_ttl": (ValueError, _claim(lease_ttl=timedelta(0))),
    "claim() with a negative lease_ttl": (ValueError, _claim(lease_ttl=-LEASE_TTL)),
    "claim() with a bare str for queues": (TypeError, _claim(queues="default")),
    "claim() with a lease_ttl in seconds, not a timedelta": (ValueError, _claim(lease_ttl=60)),
    "extend() with a zero lease_ttl": (ValueError, lambda b, lease: b.extend(lease, timedelta(0))),
    "extend_many() with a negative lease_ttl": (
        ValueError,
        lambda b, lease: b.extend_many([lease], -LEASE_TTL),
    ),
    "claim() with a lease_ttl past MAX_WAIT": (ValueError, _claim(lease_ttl=PAST_MAX_WAIT)),
    "extend() with a lease_ttl past MAX_WAIT": (
        ValueError,
        lambda b, lease: b.extend(lease, PAST_MAX_WAIT),
    ),
    "claim_expired() with a claim_ttl past MAX_WAIT": (
        ValueError,
        lambda b, _: b.claim_expired(limit=10, claim_ttl=PAST_MAX_WAIT),
    ),
    "retry() with a delay past MAX_WAIT": (
        ValueError,
        lambda b, lease: b.retry(lease, failed(lease), PAST_MAX_WAIT),
    ),
    "decide_many() ending with a delay past MAX_WAIT": (
        ValueError,
        _decide_many_ending_with(
            lambda lease: Decision(lease=lease, record=failed(lease), retry_delay=PAST_MAX_WAIT)
        ),
    ),
    "release() with a delay past MAX_WAIT": (
        ValueError,
        lambda b, lease: b.release([lease], PAST_MAX_WAIT),
    ),
    "complete() with status READY": (ValueError, _complete_as(READY)),
    "complete() with status RUNNING": (ValueError, _complete_as(RUNNING)),
    "complete() with status DEFERRED": (ValueError, _complete_as(DEFERRED)),
    "complete() with the record of another task": (
        ValueError,
        lambda b, lease: b.complete(lease, attrs.evolve(succeeded(lease), id="ready")),
    ),
    "complete() with a return value the codec cannot carry": (
        UnsupportedValue,
        lambda b, lease: b.complete(lease, succeeded(lease, {"when": (1, 2)})),
    ),
    "decide_many() ending with a return value the codec cannot carry": (
        UnsupportedValue,
        _decide_many_ending_with(
            lambda lease: Decision(lease=lease, record=succeeded(lease, {1, 2}))
        ),
    ),
    "retry() with a negative delay": (
        ValueError,
        lambda b, lease: b.retry(lease, failed(lease), -LEASE_TTL),
    ),
    "release() with a negative delay": (
        ValueError,
        lambda b, lease: b.release([lease], -LEASE_TTL),
    ),
    "release() with a delay in seconds, not a timedelta": (
        ValueError,
        lambda b, lease: b.release([lease], 5),  # type: ignore[arg-type]  # the bad input
    ),
    "retry() with the record of another task": (
        ValueError,
        lambda b, lease: b.retry(lease, attrs.evolve(failed(lease), id="ready"), timedelta(0)),
    ),
    "decide_many() ending with a bad status": (
        ValueError,
        _decide_many_ending_with(
            lambda lease: Decision(lease=lease, record=attrs.evolve(lease.record, status=READY))
        ),
    ),
    "decide_many() ending with a negative delay": (
        ValueError,
        _decide_many_ending_with(
            lambda lease: Decision(lease=lease, record=failed(lease), retry_delay=-LEASE_TTL)
        ),
    ),
    "record_progress() ending with a progress that is not a Progress": (
        ValueError,
        lambda b, lease: b.record_progress(
            [(lease, Progress(done=1)), (lease, "50%")]  # type: ignore[list-item]  # the bad input
        ),
    ),
    "record_progress() of a bare (lease, progress) pair, not a list of them": (
        ValueError,
        lambda b, lease: b.record_progress((lease, Progress(done=1))),  # type: ignore[arg-type]  # the bad input
    ),
    "claim_expired() with limit 0": (
        ValueError,
        lambda b, _: b.claim_expired(limit=0, claim_ttl=CLAIM_TTL),
    ),
    "claim_expired() with a claim_ttl in seconds, not a timedelta": (
        ValueError,
        lambda b, _: b.claim_expired(limit=10, claim_ttl=60),  # type: ignore[arg-type]  # the wrong type is the bad input
    ),
    "claim_expired() with a zero claim_ttl": (
        ValueError,
        lambda b, _: b.claim_expired(limit=10, claim_ttl=timedelta(0)),
    ),
    "promote_due() with limit 0": (ValueError, lambda b, _: b.promote_due(limit=0)),
    "peek() with a negative offset": (
        ValueError,
        lambda b, _: b.peek("default", READY, offset=-1, limit=10),
    ),
    "purge() of RUNNING": (ValueError, lambda b, _: b.purge("default", RUNNING)),
    # `rates` refuses a bad window in every override, whether it keeps telemetry or not.
    "rates() with a zero window": (ValueError, lambda b, _: b.rates(timedelta(0))),
    "rates() with a negative window": (ValueError, lambda b, _: b.rates(-LEASE_TTL)),
    "rates() with a window in seconds, not a timedelta": (
        ValueError,
        lambda b, _: b.rates(60),  # type: ignore[arg-type]  # the wrong type is the bad input
    ),
    "enqueue() of a record whose args are a tuple": (
        UnsupportedValue,
        lambda b, _: b.enqueue([new_task("fresh-1", args=(1, 2))]),
    ),
    "enqueue() of a record whose kwargs are not a dict": (
        UnsupportedValue,
        lambda b, _: b.enqueue([new_task("fresh-1", kwargs=None)]),
    ),
    "enqueue() of a record whose retry policy's path is not a str": (
        UnsupportedValue,
        lambda b, _: b.enqueue(
            [new_task("fresh-1", retry=RetryPolicySpec(path=5))]  # type: ignore[arg-type]  # the wrong type is the bad input
        ),
    ),
    "enqueue() of a record whose id is not a str": (
        UnsupportedValue,
        lambda b, _: b.enqueue([new_task(5)]),  # type: ignore[arg-type]  # the wrong type is the bad input
    ),
    "enqueue() of a record whose headers are not all str": (
        UnsupportedValue,
        lambda b, _: b.enqueue([new_task("fresh-1", headers={"traceparent": 1})]),
    ),
    "enqueue() of a record whose headers are past their bounds": (
        UnsupportedValue,
        lambda b, _: b.enqueue([new_task("fresh-1", headers={"tracestate": "x" * 5000})]),
    ),
    "enqueue_calls() with a template whose headers are past their bounds": (
        UnsupportedValue,
        lambda b, _: b.enqueue_calls(
            new_task("template", headers={f"h{i}": "" for i in range(100)}),
            [("fresh-1", [], {})],
        ),
    ),
    "enqueue() of a record with a header value that is not valid Unicode": (
        UnsupportedValue,
        lambda b, _: b.enqueue([new_task("fresh-1", headers={"tracestate": "a\ud800"})]),
    ),
    "enqueue_calls() with a template whose header value is not valid Unicode": (
        UnsupportedValue,
        lambda b, _: b.enqueue_calls(
            new_task("template", headers={"tracestate": "\udfff"}), [("fresh-1", [], {})]
        ),
    ),
    "enqueue() of a batch ending with a queue that is not a str": (
        UnsupportedValue,
        lambda b, _: b.enqueue(
            [new_task("fresh-1"), new_task("fresh-2", queue=3)]  # type: ignore[arg-type]  # the wrong type is the bad input
        ),
    ),
}

#: Bad arguments at the storage interface: each raises (ValueError; TypeError for
#: a bare str as queues; UnsupportedValue for a return value the codec cannot
#: carry, or a record to enqueue whose args are not a list, whose kwargs are not a
#: dict, whose id or queue is not a str, whose headers are not a small dict of str
#: of valid Unicode text (`threadmill_core.headers`), or whose retry policy the
#: codec cannot carry) and changes nothing.
BAD_INPUT_CASES: dict[str, Scenario] = {
    rule: _refused(rule, error, call) for rule, (error, call) in _BAD_CALLS.items()
}
