"""Corrupt rows beside good ones: each is quarantined FAILED, its neighbours go on as usual.

The damage is the harness's (`threadmill_postgres.testing.CORRUPTIONS`): a
value the schema accepts but no valid record holds, as a crash, a bug or a
hand edit could leave.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta

import pytest

from tests.conftest import PostgresDatabase
from tests.postgres import pg_tasks
from tests.postgres.conftest import LEASE, tasks
from threadmill_core import connect
from threadmill_core.backend import NOTHING_DEFERRED
from threadmill_core.models import TaskResult, TaskResultStatus
from threadmill_core.testing import Harness
from threadmill_postgres.testing import make_harness

pytestmark = pytest.mark.postgres

READY = TaskResultStatus.READY
RUNNING = TaskResultStatus.RUNNING
FAILED = TaskResultStatus.FAILED
SUCCESSFUL = TaskResultStatus.SUCCESSFUL


def quarantined(harness: Harness, task_id: str, says: str) -> TaskResult:
    """The stored record of a quarantined task, checked: FAILED, readable, its error says `says`."""
    stored = harness.backend.get(task_id)
    assert stored is not None
    assert stored.status is FAILED
    error = stored.errors[-1]
    assert error.exception_class_path.endswith("TaskQuarantined"), error
    assert says in error.message, error.message
    return stored


@pytest.mark.parametrize(
    ("corruption", "says"),
    [
        ("timestamp out of range", "enqueued_at 4611686018427387904 ms"),
        ("due time out of range", "run_after 4611686018427387904 ms"),
        ("priority out of range", "priority"),
        ("payload garbled", "could not be decoded"),
    ],
)
def test_a_claim_quarantines_a_corrupt_ready_row_and_takes_its_neighbours(
    harness: Harness, corruption: str, says: str
) -> None:
    """A claim meeting a corrupt READY row fails it with the reason and claims every good one."""
    backend = harness.backend
    records = backend.enqueue(tasks(5))
    bad = records[2]
    harness.corruptions[corruption](bad.id)
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=10)
    assert [lease.task_id for lease in leases] == [r.id for r in records if r is not bad]
    stored = quarantined(harness, bad.id, says)
    assert -100 <= stored.priority <= 100
    assert backend.counts()["default"].failed == 1


def test_a_deferred_row_due_past_any_datetime_is_promoted_then_quarantined(
    harness: Harness,
) -> None:
    """run_after = 2^62 on a DEFERRED row: next_due and promote_due work, and the claim fails it."""
    backend = harness.backend
    now = backend.now()
    records = backend.enqueue(tasks(3, run_after=now + timedelta(minutes=1)))
    bad = records[1]
    harness.corruptions["due time out of range"](bad.id)
    assert backend.next_due() == timedelta(minutes=1), "the good ones are first in line"
    harness.advance(timedelta(minutes=2))
    assert backend.next_due() == timedelta(0)
    assert backend.promote_due(limit=10) == 3, "the corrupt one counts as due, last"
    assert backend.next_due() is NOTHING_DEFERRED
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=10)
    assert sorted(lease.task_id for lease in leases) == sorted([records[0].id, records[2].id])
    quarantined(harness, bad.id, "run_after 4611686018427387904 ms")


def test_a_lone_corrupt_due_time_is_due_at_once(harness: Harness) -> None:
    """When the only DEFERRED row is due past any datetime, next_due says due, not an overflow."""
    backend = harness.backend
    [record] = backend.enqueue(tasks(1, run_after=backend.now() + timedelta(hours=1)))
    harness.corruptions["due time out of range"](record.id)
    assert backend.next_due() == timedelta(0)
    assert backend.promote_due(limit=10) == 1
    assert backend.claim(["default"], worker="w", lease_ttl=LEASE) == []
    quarantined(harness, record.id, "run_after")


@pytest.mark.parametrize("corruption", ["timestamp out of range", "priority out of range"])
def test_the_reaper_quarantines_a_corrupt_running_row_and_reaps_its_neighbours(
    harness: Harness, corruption: str
) -> None:
    """An expired lease on a corrupt row: claim_expired fails it and claims the good ones."""
    backend = harness.backend
    records = backend.enqueue(tasks(3))
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=3)
    assert backend.mark_started(leases) == [True] * 3
    bad = records[1]
    harness.corruptions[corruption](bad.id)
    harness.advance(LEASE * 2)
    reaped = backend.claim_expired(limit=10, claim_ttl=LEASE)
    assert sorted(lease.task_id for lease in reaped) == sorted([records[0].id, records[2].id])
    quarantined(harness, bad.id, "enqueued_at" if "timestamp" in corruption else "priority")


def test_a_worker_starting_on_a_corrupt_ready_row_runs_the_rest(
    postgres_database: PostgresDatabase,
) -> None:
    """`threadmill worker --burst` beside a READY row stamped out of range: exit 0, rest run."""
    harness = make_harness(postgres_database.url, result_ttl=timedelta(hours=1), exact=False)
    url = f"{postgres_database.url}?namespace={harness.backend.namespace}"  # type: ignore[attr-defined]
    try:
        with connect(url) as broker:
            echo = pg_tasks.echo.using(broker=broker)
            records = broker.enqueue_many(echo, [((n,), {}) for n in range(4)])
        bad = records[1]
        harness.corruptions["timestamp out of range"](bad.id)
        env = {k: v for k, v in os.environ.items() if k != "THREADMILL_URL"}
        ran = subprocess.run(
            [sys.executable, "-m", "threadmill_core.cli", "worker", "tests.postgres.pg_tasks",
             "--broker", url, "--burst", "--processes", "1", "--threads", "2"],
            capture_output=True, text=True, timeout=120, check=False, env=env,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        for record in records:
            stored = harness.backend.get(record.id)
            assert stored is not None
            if record is bad:
                assert stored.status is FAILED
                assert "enqueued_at" in stored.errors[-1].message
            else:
                assert stored.status is SUCCESSFUL, stored
                assert stored.return_value == record.args[0]
    finally:
        harness.close()
