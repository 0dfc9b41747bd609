"""Connections that drop mid-call: every repeat is recognised, nothing is applied twice.

`DroppingConnection` drops a connection as a statement is sent ("before":
nothing reached the server) or after it ran and committed ("after": the
reply was lost). The backend sends the call again on another connection,
and the second send must answer as the first would have.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import attrs
import psycopg
import pytest

from tests.conftest import PostgresDatabase
from tests.postgres.conftest import LEASE, DroppingConnection, tasks
from threadmill_core.models import Decision, TaskResultStatus
from threadmill_core.testing import Harness
from threadmill_postgres import PostgresBackend, PostgresUnavailable

pytestmark = pytest.mark.postgres

READY, RUNNING, SUCCESSFUL = (
    TaskResultStatus.READY,
    TaskResultStatus.RUNNING,
    TaskResultStatus.SUCCESSFUL,
)
CANCELLED = TaskResultStatus.CANCELLED


def backend_of(harness: Harness) -> PostgresBackend:
    assert isinstance(harness.backend, PostgresBackend)
    return harness.backend


def test_an_acknowledgement_whose_reply_was_lost_is_answered_as_the_first_time(
    dropping: Harness,
) -> None:
    """decide_many applied, reply lost, sent again: each answer as stored, each counted once."""
    backend = backend_of(dropping)
    backend.enqueue(tasks(3))
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=3)
    done = Decision(
        lease=leases[0], record=attrs.evolve(leases[0].record, status=SUCCESSFUL, return_value=[1])
    )
    again = Decision(lease=leases[1], record=leases[1].record, retry_delay=timedelta(0))
    later = Decision(lease=leases[2], record=leases[2].record, retry_delay=timedelta(minutes=5))
    DroppingConnection.arm(backend.sql.decide_many, "after")
    answers = backend.decide_many([done, again, later])
    assert DroppingConnection.dropped == {"after": 1}
    assert [a.status if a else None for a in answers] == [
        SUCCESSFUL,
        READY,
        TaskResultStatus.DEFERRED,
    ]
    assert answers[0] is not None
    assert answers[0].return_value == [1]
    assert backend.counts()["default"] == attrs.evolve(
        backend.counts()["default"], successful=1, ready=1, deferred=1, running=0
    )
    assert backend.rates(timedelta(minutes=1))["default"].finished == 1, "counted once"
    # The retried task kept its one place in READY: the repeat did not queue it again.
    assert [r.id for r in backend.peek("default", READY)] == [leases[1].task_id]


def test_a_claim_whose_reply_was_lost_returns_the_leases_it_granted(dropping: Harness) -> None:
    """claim applied, reply lost: the repeat finds its receipt and returns those very leases."""
    backend = backend_of(dropping)
    records = backend.enqueue(tasks(5))
    DroppingConnection.arm(backend.sql.claim, "after")
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=3)
    assert DroppingConnection.dropped == {"after": 1}
    assert [lease.task_id for lease in leases] == [r.id for r in records[:3]]
    assert all(lease.record.attempts == 1 for lease in leases)
    counts = backend.counts()["default"]
    assert (counts.running, counts.ready) == (3, 2), "nothing claimed twice, nothing lost"
    # The leases are the current ones: they decide their tasks.
    for lease in leases:
        assert backend.complete(lease, attrs.evolve(lease.record, status=SUCCESSFUL)) is not None


def test_a_claim_lost_before_it_was_sent_claims_once(dropping: Harness) -> None:
    """A claim whose connection dropped before sending is sent again, and claims as usual."""
    backend = backend_of(dropping)
    backend.enqueue(tasks(2))
    DroppingConnection.arm(backend.sql.claim, "before", "before")
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=2)
    assert DroppingConnection.dropped == {"before": 2}
    assert len(leases) == 2
    assert backend.counts()["default"].running == 2


def test_a_claim_that_keeps_failing_is_an_outage(dropping: Harness) -> None:
    """Three sends lost in a row raise PostgresUnavailable; nothing is left claimed."""
    backend = backend_of(dropping)
    backend.enqueue(tasks(2))
    DroppingConnection.arm(backend.sql.claim, "before", "before", "before")
    with pytest.raises(PostgresUnavailable):
        backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=2)
    assert backend.counts()["default"].ready == 2


def test_an_enqueue_whose_reply_was_lost_stores_each_task_once(dropping: Harness) -> None:
    """enqueue applied, reply lost, sent again: the records as stored, counted as entered once."""
    backend = backend_of(dropping)
    records = tasks(4)
    DroppingConnection.arm(backend.sql.enqueue, "after")
    stored = backend.enqueue(records)
    assert DroppingConnection.dropped == {"after": 1}
    assert [r.id for r in stored] == [r.id for r in records]
    assert all(r.status is READY and r.args == o.args for r, o in zip(stored, records, strict=True))
    assert backend.counts()["default"].ready == 4
    assert backend.rates(timedelta(minutes=1))["default"].entered == 4


def test_renewals_and_releases_whose_replies_were_lost_change_nothing_more(
    dropping: Harness,
) -> None:
    """extend_many repeated renews again; release repeated finds the tasks given back already."""
    backend = backend_of(dropping)
    backend.enqueue(tasks(2))
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=2)
    DroppingConnection.arm(backend.sql.extend_many, "after")
    renewed = backend.extend_many(leases, LEASE * 2)
    assert all(lease is not None for lease in renewed)
    DroppingConnection.arm(backend.sql.release, "after")
    backend.release(leases)  # the repeat's answer: refused, since the first send cleared the tokens
    assert DroppingConnection.dropped == {"after": 2}
    ready = backend.peek("default", READY)
    assert [r.id for r in ready] == [lease.task_id for lease in leases]
    assert all(r.attempts == 0 and r.worker_ids == () for r in ready), "undone once, not twice"


def test_a_cancel_cut_off_inside_its_transaction_is_run_again_once(dropping: Harness) -> None:
    """A connection lost before the COMMIT rolled the cancel back: it runs again, counted once."""
    backend = backend_of(dropping)
    [record] = backend.enqueue(tasks(1))
    DroppingConnection.arm(backend.sql.cancel, "after")
    cancelled = backend.cancel(record.id)
    assert DroppingConnection.dropped == {"after": 1}
    assert cancelled is not None
    assert cancelled.status is CANCELLED
    assert backend.rates(timedelta(minutes=1))["default"].finished == 1


def claim_params(backend: PostgresBackend, request: str) -> dict[str, object]:
    return {
        "queues": ["default"],
        "worker": "ghost",
        "ttl": 60_000,
        "limit": 2,
        "request": request,
        "channel": backend.channel,
    }


def test_a_repeat_waits_for_a_first_send_still_in_flight_and_returns_its_leases(
    harness: Harness, database: PostgresDatabase
) -> None:
    """The first send of a claim still running when its repeat arrives: the repeat waits, then
    answers with the leases that send granted once it commits."""
    backend = backend_of(harness)
    backend.enqueue(tasks(3))
    request = "a" * 32
    with psycopg.connect(backend.conninfo, autocommit=True) as ghost:
        ghost.execute("BEGIN")
        ghost.execute(backend.sql.claim, claim_params(backend, request))  # not committed yet
        found: list[object] = []
        repeat = threading.Thread(
            target=lambda: found.append(backend._claimed_before(request, 60_000))
        )
        repeat.start()
        repeat.join(timeout=0.5)
        assert repeat.is_alive(), "the repeat waits for the first send"
        ghost.execute("COMMIT")
        repeat.join(timeout=10)
    [rows] = found
    assert rows is not None
    assert [row[1] for row in rows] == [f"{request}-1", f"{request}-2"]  # type: ignore[union-attr]
    assert backend.counts()["default"].running == 2


def test_a_first_send_that_runs_after_its_repeat_changes_nothing(harness: Harness) -> None:
    """A repeat that finds no receipt takes it, so the late first send fails and claims nothing."""
    backend = backend_of(harness)
    backend.enqueue(tasks(3))
    request = "b" * 32
    assert backend._claimed_before(request, 60_000) is None, "nothing was claimed under it"
    with (
        psycopg.connect(backend.conninfo, autocommit=True) as ghost,
        pytest.raises(psycopg.errors.UniqueViolation),
    ):
        ghost.execute(backend.sql.claim, claim_params(backend, request))
    assert backend.counts()["default"].ready == 3
