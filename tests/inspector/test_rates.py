"""Telemetry on the storage interface: the default knows nothing; the memory backend counts."""

from __future__ import annotations

from datetime import timedelta

import attrs
import pytest

from threadmill_core import Backend, FakeClock, TaskError, TaskResult, TaskResultStatus
from threadmill_core.backend import RATE_HISTORY
from threadmill_core.models import QueueRates
from threadmill_memory import MemoryBackend

MINUTE = timedelta(minutes=1)
LEASE = timedelta(seconds=30)


def rates_of(backend: MemoryBackend, window: timedelta, queue: str = "q") -> QueueRates:
    rates = backend.rates(window)
    assert rates is not None
    return rates[queue]


def new(task_id: str, queue: str = "q") -> TaskResult:
    return TaskResult(id=task_id, task_path="app:work", queue=queue)


def finish(backend: MemoryBackend, status: TaskResultStatus, queue: str = "q") -> None:
    (lease,) = backend.claim([queue], worker="w", lease_ttl=LEASE)
    error = TaskError(exception_class_path="builtins.ValueError", message="no")
    backend.complete(lease, attrs.evolve(lease.record, status=status, errors=(error,)))


def test_the_default_keeps_no_history() -> None:
    """Backend.rates answers None (unknown, not zero) unless a backend overrides it."""
    backend = MemoryBackend(clock=FakeClock())
    backend.enqueue([new("a")])
    assert Backend.rates(backend, MINUTE) is None


@pytest.mark.parametrize("window", [timedelta(0), timedelta(seconds=-1), 60])
def test_a_window_must_be_a_positive_timedelta(window: object) -> None:
    """A window that is not a positive timedelta is a ValueError, in the default and overrides."""
    backend = MemoryBackend(clock=FakeClock())
    with pytest.raises(ValueError, match="window must be a positive timedelta"):
        Backend.rates(backend, window)  # type: ignore[arg-type]  # the bad value under test
    with pytest.raises(ValueError, match="window must be a positive timedelta"):
        backend.rates(window)  # type: ignore[arg-type]  # the bad value under test


def test_an_idle_backend_with_telemetry_answers_an_empty_mapping() -> None:
    """A backend that keeps telemetry but saw nothing answers {} (zero), not None (unknown)."""
    assert MemoryBackend(clock=FakeClock()).rates(MINUTE) == {}


def test_enqueue_and_requeue_enter_and_terminal_states_finish() -> None:
    """Entering counts enqueue and requeue; finishing counts SUCCESSFUL, FAILED and CANCELLED."""
    clock = FakeClock()
    backend = MemoryBackend(clock=clock)
    backend.enqueue([new(str(n)) for n in range(5)] + [new("x", queue="other")])
    backend.enqueue([new("0")])  # a repeat of a stored id enters nothing
    finish(backend, TaskResultStatus.SUCCESSFUL)
    finish(backend, TaskResultStatus.FAILED)
    backend.cancel("4")
    backend.requeue("1")
    (lease,) = backend.claim(["q"], worker="w", lease_ttl=LEASE)
    backend.retry(lease, lease.record, timedelta(seconds=5))  # a retry is neither
    clock.advance(timedelta(seconds=5))
    backend.promote_due(limit=10)  # nor a promotion
    backend.purge("other", TaskResultStatus.READY)  # nor a purge

    assert backend.rates(MINUTE) == {
        "other": QueueRates(queue="other", window=MINUTE, entered=1, finished=0),
        "q": QueueRates(queue="q", window=MINUTE, entered=6, finished=3),
    }
    assert rates_of(backend, MINUTE).ingress == pytest.approx(0.1)
    assert rates_of(backend, MINUTE).egress == pytest.approx(0.05)


def test_quarantined_poison_counts_as_finished() -> None:
    """A claim that finalizes undecodable bytes FAILED counts that task as finished."""
    backend = MemoryBackend(clock=FakeClock())
    backend._plant_raw("poison", b"not json")
    assert backend.claim(["default"], worker="w", lease_ttl=LEASE) == []
    assert backend.rates(MINUTE) == {
        "default": QueueRates(queue="default", window=MINUTE, entered=0, finished=1)
    }


def test_the_window_slides_on_the_backend_clock() -> None:
    """Events leave the window once it has passed them, to the second, on the backend's clock."""
    clock = FakeClock()
    backend = MemoryBackend(clock=clock)
    backend.enqueue([new("a")])
    clock.advance(timedelta(seconds=30))
    backend.enqueue([new("b"), new("c")])
    clock.advance(timedelta(seconds=29, milliseconds=999))
    assert rates_of(backend, MINUTE).entered == 3
    clock.advance(timedelta(milliseconds=1))
    assert rates_of(backend, MINUTE).entered == 2
    assert backend.rates(timedelta(seconds=10)) == {}
    clock.advance(timedelta(seconds=30))
    assert backend.rates(MINUTE) == {}


def test_history_is_bounded_to_an_hour_of_buckets_per_queue() -> None:
    """A window beyond the history is answered over the history, which never holds over an hour."""
    clock = FakeClock()
    backend = MemoryBackend(clock=clock)
    for n in range(3600 + 100):
        backend.enqueue([new(f"t{n}")])
        clock.advance(timedelta(seconds=1))
    rates = backend.rates(timedelta(hours=5))
    assert rates is not None
    assert rates["q"].window == RATE_HISTORY
    assert rates["q"].entered == 3599  # the hour's 3,600 buckets end with the current, empty one
    assert len(backend._history._queues["q"]) <= 3600
    clock.advance(RATE_HISTORY)
    assert backend.rates(timedelta(hours=5)) == {}
    assert backend._history._queues == {}
