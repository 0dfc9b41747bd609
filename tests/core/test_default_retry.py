"""The default retry policy: interruptions retried a bounded number of times, nothing else."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from threadmill_core import AcknowledgementTimeout, ExponentialBackoff, Lease, TaskError, TaskResult
from threadmill_core.models import TaskResultStatus
from threadmill_core.retry import (
    DEFAULT_RETRY,
    INTERRUPTION_RETRIES,
    decide,
    no_retry,
    policy_spec,
    resolve_policy,
)

NOW = datetime(2030, 1, 1, tzinfo=UTC)
INTERRUPTED = TaskError(
    exception_class_path=f"{AcknowledgementTimeout.__module__}.AcknowledgementTimeout",
    message="the lease of attempt 1 expired before the worker (w) acknowledged it",
)


def running(attempts: int, **fields: object) -> Lease:
    record = TaskResult(
        id="t", task_path="m:f", attempts=attempts, status=TaskResultStatus.RUNNING, **fields
    )  # type: ignore[arg-type]  # the record's optional fields, as keywords
    return Lease(token="1", deadline=NOW, record=record)


def test_a_task_that_names_no_policy_has_the_default() -> None:
    """No stored policy resolves to DEFAULT_RETRY, not to no_retry."""
    assert resolve_policy(None) is DEFAULT_RETRY


@pytest.mark.parametrize(("attempt", "base"), [(1, 1), (2, 2), (3, 4)])
def test_the_default_retries_an_interruption_after_a_short_backoff(
    attempt: int, base: float
) -> None:
    """An interrupted attempt within the bound is retried after 1, 2, 4 s, plus up to a tenth."""
    decision = decide(running(attempt), INTERRUPTED)
    assert decision.retry_delay is not None
    assert timedelta(seconds=base) <= decision.retry_delay <= timedelta(seconds=base * 1.1)
    assert decision.record.errors == (INTERRUPTED,)
    assert decision.record.status is TaskResultStatus.RUNNING


def test_the_default_gives_up_after_the_bound() -> None:
    """The attempt after INTERRUPTION_RETRIES retries, interrupted too, is FAILED."""
    assert INTERRUPTION_RETRIES == 3
    decision = decide(running(INTERRUPTION_RETRIES + 1), INTERRUPTED)
    assert decision.retry_delay is None
    assert decision.record.status is TaskResultStatus.FAILED
    assert decision.record.errors == (INTERRUPTED,)


@pytest.mark.parametrize("exc", [ValueError("boom"), SystemExit(3), KeyboardInterrupt()])
def test_the_default_never_retries_the_tasks_own_exception(exc: BaseException) -> None:
    """Whatever the task raised itself is final under the default, on any attempt."""
    decision = decide(running(1), TaskError.from_exception(exc))
    assert decision.retry_delay is None
    assert decision.record.status is TaskResultStatus.FAILED


def test_an_explicit_policy_decides_interruptions_too() -> None:
    """A task naming a policy gets only that policy's verdict on an interruption."""
    never = running(1, retry=policy_spec(no_retry))
    assert decide(never, INTERRUPTED).record.status is TaskResultStatus.FAILED
    only_os = running(1, retry=policy_spec(ExponentialBackoff(retry_on=[OSError])))
    assert decide(only_os, INTERRUPTED).retry_delay is None
    many = running(7, retry=policy_spec(ExponentialBackoff(max_retries=10, jitter=0)))
    assert decide(many, INTERRUPTED).retry_delay == timedelta(seconds=64)
