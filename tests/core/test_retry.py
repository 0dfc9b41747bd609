"""Retry policies and the one shared retry decision."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from threadmill_core import (
    ExponentialBackoff,
    InvalidOption,
    Lease,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultStatus,
    codec,
)
from threadmill_core.checks import MAX_WAIT
from threadmill_core.models import RetryPolicySpec
from threadmill_core.retry import MAX_DELAY_SECONDS, decide, policy_spec, resolve_policy
from threadmill_memory import MemoryBackend

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def context(attempt: int, error: TaskError | None = None) -> TaskContext:
    record = TaskResult(id="t", task_path="m:f", attempts=attempt)
    return TaskContext(record=record, attempt=attempt, last_error=error)


def error_of(exc: BaseException) -> TaskError:
    return TaskError.from_exception(exc)


def lease_on(record: TaskResult) -> Lease:
    return Lease(token="1", deadline=NOW, record=record)


def test_backoff_grows_by_factor_and_stops_at_max_delay() -> None:
    """Delays are base * factor ** (attempt - 1), capped at max_delay."""
    policy = ExponentialBackoff(base_delay=1, max_delay=30, factor=3, max_retries=None, jitter=0)
    delays = [policy(context(n)) for n in range(1, 6)]
    assert delays == [timedelta(seconds=s) for s in (1, 3, 9, 27, 30)]


@pytest.mark.parametrize("attempt", [1_000, 10**6, 10**18])
def test_backoff_never_overflows(attempt: int) -> None:
    """A huge attempt number gives max_delay, not an OverflowError."""
    policy = ExponentialBackoff(base_delay=0.5, max_delay=60, max_retries=None, jitter=0)
    assert policy(context(attempt)) == timedelta(seconds=60)


def test_a_zero_base_delay_never_overflows() -> None:
    """With base_delay=0 and no retry bound, attempt 1,025 (and later ones) waits 0 s."""
    policy = ExponentialBackoff(base_delay=0, max_retries=None, jitter=0)
    assert [policy(context(n)) for n in (1, 1_025, 10**6)] == [timedelta(0)] * 3


@given(
    base=st.floats(min_value=0, max_value=MAX_DELAY_SECONDS),
    ceiling=st.floats(min_value=0, max_value=MAX_DELAY_SECONDS),
    factor=st.one_of(st.floats(min_value=1, max_value=1e300), st.integers(1, 10**6)),
    jitter=st.floats(min_value=0, max_value=1),
    attempt=st.one_of(st.integers(0, 2_000), st.integers(0, 10**400)),
)
def test_backoff_delays_are_total(
    base: float, ceiling: float, factor: float, jitter: float, attempt: int
) -> None:
    """Any valid policy gives a delay between base_delay and max_delay (plus its jitter) for
    any attempt number, never an OverflowError."""
    base, ceiling = min(base, ceiling), max(base, ceiling)
    policy = ExponentialBackoff(
        base_delay=base, max_delay=ceiling, factor=factor, max_retries=None, jitter=jitter
    )
    delay = policy.delay_for(attempt)
    assert base <= delay <= ceiling
    waited = policy(context(attempt))
    assert waited is not None
    assert delay - 1e-6 <= waited.total_seconds() <= delay * (1 + jitter) * (1 + 1e-9) + 1e-6


def test_a_max_delay_past_timedelta_range_is_refused() -> None:
    """A max_delay a jittered timedelta could not hold is an InvalidOption at construction."""
    with pytest.raises(InvalidOption, match="max_delay must be at most"):
        ExponentialBackoff(max_delay=1e300)


def test_backoff_gives_up_after_max_retries() -> None:
    """With max_retries=2, attempts 1 and 2 are retried and attempt 3 is final."""
    policy = ExponentialBackoff(max_retries=2, jitter=0)
    assert [policy(context(n)) is None for n in (1, 2, 3)] == [False, False, True]


def test_jitter_stays_within_its_fraction() -> None:
    """Jitter adds at most `jitter` times the delay, never subtracts."""
    policy = ExponentialBackoff(base_delay=10, jitter=0.5, max_retries=None)
    delays = {policy(context(1)) for _ in range(200)}
    assert all(timedelta(seconds=10) <= d <= timedelta(seconds=15) for d in delays if d)
    assert len(delays) > 1


def test_retry_on_admits_subclasses_and_refuses_others() -> None:
    """retry_on matches the class and its subclasses, by class or by path."""
    policy = ExponentialBackoff(retry_on=[OSError, "builtins.KeyError"], jitter=0)
    assert policy(context(1, error_of(ConnectionError("x")))) is not None
    assert policy(context(1, error_of(KeyError("x")))) is not None
    assert policy(context(1, error_of(ValueError("x")))) is None


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"factor": 0.5}, "factor"),
        ({"max_retries": -1}, "max_retries"),
        ({"jitter": 2}, "jitter"),
        ({"base_delay": -1}, "base_delay"),
        ({"base_delay": 10, "max_delay": 1}, "max_delay"),
        ({"retry_on": ["KeyError"]}, "retry_on"),
        ({"retry_on": [42]}, "retry_on"),
        ({"base_delay": "abc"}, "base_delay"),
        ({"base_delay": "5"}, "base_delay"),
        ({"base_delay": None}, "base_delay"),
        ({"base_delay": True}, "base_delay"),
        ({"base_delay": 10**400}, "base_delay"),
        ({"max_delay": "3600"}, "max_delay"),
        ({"factor": 10**400}, "factor"),
        ({"factor": True}, "factor"),
        ({"jitter": True}, "jitter"),
        ({"jitter": float("nan")}, "jitter"),
        ({"retry_on": "builtins.OSError"}, "retry_on.*'builtins.OSError'"),
        ({"retry_on": OSError}, "retry_on.*OSError"),
    ],
)
def test_bad_backoff_options_are_refused(options: dict[str, object], match: str) -> None:
    """Nonsense backoff settings raise InvalidOption at construction, naming the option."""
    with pytest.raises(InvalidOption, match=match):
        ExponentialBackoff(**options)  # type: ignore[arg-type]  # the bad option under test


def test_backoff_survives_a_round_trip_through_storage() -> None:
    """A policy stored in a record comes back as an equal policy."""
    policy = ExponentialBackoff(base_delay=2, max_delay=9, factor=1.5, retry_on=[OSError])
    stored = codec.loads(codec.dumps(policy_spec(policy)), RetryPolicySpec)
    assert resolve_policy(stored) == policy


def test_unknown_policy_path_is_not_imported() -> None:
    """A stored policy path no loaded task uses is refused, not imported."""
    with pytest.raises(LookupError, match="not imported"):
        resolve_policy(RetryPolicySpec(path="os:system"))


def test_decide_retries_with_the_errors_appended() -> None:
    """A failure the policy retries keeps the record and appends the error."""
    record = TaskResult(
        id="t", task_path="m:f", attempts=1, status=TaskResultStatus.RUNNING,
        retry=policy_spec(ExponentialBackoff(base_delay=4, jitter=0)),
    )  # fmt: skip
    decision = decide(lease_on(record), error_of(ValueError("boom")))
    assert decision.retry_delay == timedelta(seconds=4)
    assert [e.message for e in decision.record.errors] == ["boom"]


def test_decide_fails_when_the_policy_gives_up() -> None:
    """A failure the policy does not retry is final FAILED."""
    record = TaskResult(id="t", task_path="m:f", attempts=1, status=TaskResultStatus.RUNNING)
    decision = decide(lease_on(record), error_of(ValueError("boom")))
    assert decision.retry_delay is None
    assert decision.record.status is TaskResultStatus.FAILED


def raising_policy(context: TaskContext) -> timedelta | None:
    raise RuntimeError("policy bug")


def test_a_policy_that_raises_makes_the_failure_final_and_says_why() -> None:
    """A broken policy cannot keep a task cycling: FAILED, with the policy's error recorded."""
    record = TaskResult(id="t", task_path="m:f", attempts=1, retry=policy_spec(raising_policy))
    decision = decide(lease_on(record), error_of(ValueError("boom")))
    assert decision.record.status is TaskResultStatus.FAILED
    assert [e.message for e in decision.record.errors] == ["boom", "policy bug"]


def test_a_delay_past_what_a_backend_takes_is_capped_and_applied() -> None:
    """A backoff of a million years is a thousand (`MAX_WAIT`): the memory backend applies
    the retry, and the task reads back DEFERRED with a due time a datetime holds."""
    backend = MemoryBackend()
    backend.enqueue([TaskResult(id="t", task_path="m:f")])
    [lease] = backend.claim(["default"], worker="w", lease_ttl=timedelta(seconds=30))
    policy = ExponentialBackoff(base_delay=MAX_DELAY_SECONDS, max_delay=MAX_DELAY_SECONDS, jitter=0)
    decision = decide(lease, error_of(ValueError("boom")), policy)
    assert decision.retry_delay == MAX_WAIT
    retried = backend.retry(decision.lease, decision.record, decision.retry_delay)
    assert retried is not None
    assert retried.status is TaskResultStatus.DEFERRED
    assert retried.run_after is not None
    assert timedelta(0) <= MAX_WAIT - (retried.run_after - backend.now()) < timedelta(seconds=5)


def test_an_unresolvable_policy_makes_the_failure_final() -> None:
    """A record naming a policy this process does not know is finalized FAILED."""
    record = attrs.evolve(
        TaskResult(id="t", task_path="m:f", attempts=1),
        retry=RetryPolicySpec(path="evil:policy"),
    )
    decision = decide(lease_on(record), error_of(ValueError("boom")))
    assert decision.record.status is TaskResultStatus.FAILED
    assert "evil:policy" in decision.record.errors[-1].message
