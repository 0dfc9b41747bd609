"""A batch is one statement and one commit: claims, renewals, decisions, releases, enqueues."""

from __future__ import annotations

from datetime import timedelta

import attrs
import pytest

from tests.postgres.conftest import LEASE, CountingConnection, tasks
from threadmill_core.models import Decision, TaskError, TaskResultStatus
from threadmill_core.testing import Harness

pytestmark = pytest.mark.postgres

SUCCESSFUL = TaskResultStatus.SUCCESSFUL


class Statements:
    """The statements the pool's connections ran in a block of calls."""

    def __enter__(self) -> Statements:
        self.start = len(CountingConnection.executed)
        return self

    def __exit__(self, *exc: object) -> None:
        self.sent = CountingConnection.executed[self.start :]

    @property
    def count(self) -> int:
        return len(self.sent)


def test_each_batch_operation_on_64_tasks_is_one_statement(counted: Harness) -> None:
    """enqueue, claim, extend_many, decide_many and release of 64 tasks: one statement each."""
    backend = counted.backend
    backend.now()  # the pool's first connection, and the schema check it makes
    with Statements() as enqueue:
        backend.enqueue(tasks(128))
    with Statements() as claim:
        leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=64)
    with Statements() as extend:
        renewed = backend.extend_many(leases, LEASE)
    decisions = [
        Decision(lease=lease, record=attrs.evolve(lease.record, status=SUCCESSFUL))
        if n % 2
        else Decision(
            lease=lease,
            record=attrs.evolve(
                lease.record, errors=(TaskError(exception_class_path="x.E", message="boom"),)
            ),
            retry_delay=timedelta(seconds=n % 3),
        )
        for n, lease in enumerate(leases)
    ]
    with Statements() as decide:
        decided = backend.decide_many(decisions)
    more = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=64)
    with Statements() as release:
        released = backend.release(more)

    assert len(leases) == len(more) == 64
    assert all(lease is not None for lease in renewed)
    assert all(record is not None for record in decided)
    assert all(record is not None for record in released)
    costs = {
        "enqueue": enqueue.count,
        "claim": claim.count,
        "extend_many": extend.count,
        "decide_many": decide.count,
        "release": release.count,
    }
    assert costs == dict.fromkeys(costs, 1), costs
    assert decide.sent == [backend.sql.decide_many]  # type: ignore[attr-defined]  # a PostgresBackend


def test_a_long_enqueue_takes_a_statement_per_slice(counted: Harness) -> None:
    """2,500 records at enqueue_batch 1,000: three statements, every record stored."""
    backend = counted.backend
    backend.now()
    with Statements() as enqueue:
        stored = backend.enqueue(tasks(2500))
    assert enqueue.count == 3
    assert len({record.id for record in stored}) == 2500
    assert backend.counts()["default"].ready == 2500


def test_a_repeated_enqueue_decodes_before_it_inserts(counted: Harness) -> None:
    """A batch with a stored id: a guarded statement that inserts nothing, then the rest."""
    backend = counted.backend
    first = backend.enqueue(tasks(2))
    again = [*first, *tasks(3)]
    with Statements() as enqueue:
        stored = backend.enqueue(again)
    assert enqueue.count == 2
    assert [r.id for r in stored] == [r.id for r in again]
    assert backend.counts()["default"].ready == 5


def test_marking_64_starts_is_one_statement(counted: Harness) -> None:
    """mark_started of 64 leases: one statement, every one marked."""
    backend = counted.backend
    backend.enqueue(tasks(64))
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=64)
    with Statements() as mark:
        marked = backend.mark_started(leases)
    assert marked == [True] * 64
    assert mark.count == 1


def test_a_reaper_pass_giving_back_300_unstarted_claims_is_two_statements(
    counted: Harness,
) -> None:
    """300 unstarted expired claims: all given back by one pass, which scans them in two."""
    backend = counted.backend
    backend.enqueue(tasks(300))
    backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=300)
    counted.advance(LEASE * 2)
    with Statements() as reap:
        assert backend.claim_expired(limit=10, claim_ttl=LEASE) == []
    assert backend.counts()["default"].ready == 300
    assert reap.count == 2


def test_a_reaper_pass_of_many_is_two_statements(counted: Harness) -> None:
    """claim_expired of 50 started claims and decide_many of their 50 retries: a statement each."""
    backend = counted.backend
    backend.enqueue(tasks(50))
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=50)
    backend.mark_started(leases)
    counted.advance(LEASE * 2)
    with Statements() as reap:
        reaped = backend.claim_expired(limit=100, claim_ttl=LEASE)
        backend.decide_many(
            [
                Decision(lease=lease, record=lease.record, retry_delay=timedelta(0))
                for lease in reaped
            ]
        )
    assert {lease.task_id for lease in reaped} == {lease.task_id for lease in leases}
    assert reap.count == 2
