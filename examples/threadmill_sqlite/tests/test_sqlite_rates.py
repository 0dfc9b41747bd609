"""Telemetry (`rates`): counted in the transaction that makes each change, bounded to an hour."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import attrs
import pytest
from threadmill_core.backend import RATE_HISTORY
from threadmill_core.clock import FakeClock
from threadmill_core.models import QueueRates, TaskResult, TaskResultStatus

from threadmill_sqlite import SQLiteBackend
from threadmill_sqlite.testing import FakeClockBackend, plant_raw

MINUTE = timedelta(minutes=1)
LEASE = timedelta(seconds=30)


def new(task_id: str, queue: str = "q") -> TaskResult:
    return TaskResult(id=task_id, task_path="app.tasks:work", queue=queue)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fake(db_path: Path, clock: FakeClock) -> Iterator[FakeClockBackend]:
    built = FakeClockBackend(db_path, clock=clock, synchronous="normal")
    try:
        yield built
    finally:
        built.close()


def finish(backend: SQLiteBackend, status: TaskResultStatus) -> None:
    (lease,) = backend.claim(["q"], worker="w", lease_ttl=LEASE)
    backend.complete(lease, attrs.evolve(lease.record, status=status))


def rows(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        (count,) = conn.execute("SELECT COUNT(*) FROM threadmill_rates").fetchone()
    conn.close()
    return int(count)


def test_entering_and_finishing_are_counted_and_nothing_else(fake: FakeClockBackend) -> None:
    """enqueue and requeue enter; complete, cancel and quarantine finish; retries do neither."""
    assert fake.rates(MINUTE) == {}
    fake.enqueue([new(str(n)) for n in range(5)] + [new("x", queue="other")])
    fake.enqueue([new("0")])  # a repeat of a stored id enters nothing
    finish(fake, TaskResultStatus.SUCCESSFUL)
    finish(fake, TaskResultStatus.FAILED)
    fake.cancel("4")
    fake.requeue("1")
    (lease,) = fake.claim(["q"], worker="w", lease_ttl=LEASE)
    fake.retry(lease, lease.record, timedelta(0))
    plant_raw(fake, "3", payload=b"not json")
    assert fake.claim(["q"], worker="w", lease_ttl=LEASE, limit=3) != []  # "3" is quarantined
    assert fake.rates(MINUTE) == {
        "other": QueueRates(queue="other", window=MINUTE, entered=1, finished=0),
        "q": QueueRates(queue="q", window=MINUTE, entered=6, finished=4),
    }


def test_the_window_slides_and_old_buckets_are_deleted(
    fake: FakeClockBackend, clock: FakeClock, db_path: Path
) -> None:
    """Counts leave the window as the clock passes, and rows older than an hour are deleted."""
    fake.enqueue([new("a")])
    clock.advance(timedelta(seconds=59, milliseconds=999))
    assert fake.rates(MINUTE)["q"].entered == 1
    clock.advance(timedelta(milliseconds=1))
    assert fake.rates(MINUTE) == {}
    assert fake.rates(timedelta(hours=3))["q"] == QueueRates(
        queue="q", window=RATE_HISTORY, entered=1, finished=0
    )
    for n in range(100):
        clock.advance(timedelta(minutes=1))
        fake.enqueue([new(f"b{n}")])
    assert rows(db_path) == 60  # one bucket a minute, an hour's worth
    assert fake.rates(timedelta(hours=3))["q"].entered == 60
