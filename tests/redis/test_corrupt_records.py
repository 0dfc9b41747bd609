"""Corrupt records on a real Redis: quarantined, and never at their neighbours' cost."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import attrs
import pytest
import redis

from tests.redis.conftest import tasks
from threadmill_core.errors import PayloadError
from threadmill_core.models import Decision, TaskResultStatus
from threadmill_core.testing import Harness
from threadmill_core.worker.startup import unregistered_waiting

pytestmark = pytest.mark.redis

LEASE = timedelta(minutes=5)


@pytest.mark.parametrize("damage", ["missing", "garbled"])
def test_a_corrupt_ready_entry_claimed_with_good_tasks_costs_them_nothing(
    real_client: redis.Redis, harness_on: Callable[..., Harness], damage: str
) -> None:
    """A READY task whose state is missing or garbled, claimed in one batch with good ones,
    is quarantined FAILED; the good ones are all claimed and run, and none is lost."""
    harness = harness_on(real_client)
    backend = harness.backend
    records = backend.enqueue(tasks(5))
    bad = records[2]
    state = backend.keys.store("state")
    if damage == "missing":
        real_client.hdel(state, bad.id)
    else:
        real_client.hset(state, bad.id, b"READY|0|not a number|1|||||||default")
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=10)
    good = [r.id for r in records if r.id != bad.id]
    assert [lease.task_id for lease in leases] == good
    done = backend.decide_many(
        [
            Decision(lease=x, record=attrs.evolve(x.record, status=TaskResultStatus.SUCCESSFUL))
            for x in leases
        ]
    )
    assert all(record is not None for record in done)
    counts = backend.counts()["default"]
    assert (counts.ready, counts.running, counts.successful, counts.failed) == (0, 0, 4, 1)
    quarantined = backend.get(bad.id)
    assert quarantined is not None
    assert quarantined.status is TaskResultStatus.FAILED
    assert "corrupt" in quarantined.errors[-1].message
    assert ("missing" if damage == "missing" else "not valid") in quarantined.errors[-1].message
    rates = backend.rates(timedelta(minutes=1))
    assert rates is not None
    assert rates["default"].finished == 5  # the quarantined task counted as finished too


@pytest.mark.parametrize("damage", ["missing", "garbled"])
def test_the_worker_start_scan_reads_past_a_corrupt_ready_entry(
    real_client: redis.Redis, harness_on: Callable[..., Harness], damage: str
) -> None:
    """The worker's startup look at waiting tasks never fails on a corrupt entry: reading it
    is a PayloadError naming the task (poison, left to the claim), which the look skips."""
    harness = harness_on(real_client)
    backend = harness.backend
    records = backend.enqueue(tasks(3))
    bad = records[1].id
    if damage == "missing":
        real_client.hdel(backend.keys.store("state"), bad)
    else:
        real_client.hset(backend.keys.store("state"), bad, b"\xff garbage")
    with pytest.raises(PayloadError, match=bad):
        backend.peek("default", TaskResultStatus.READY)
    assert unregistered_waiting(backend, ["default"], known=[]) == {}


@pytest.mark.parametrize("hash_name", ["workers", "starts"])
def test_a_garbled_worker_list_or_start_mark_never_stops_a_reaper_pass(
    real_client: redis.Redis, harness_on: Callable[..., Harness], hash_name: str
) -> None:
    """A task whose worker ids or start mark are garbled is given back or reaped like its
    neighbours; the pass goes on past it."""
    harness = harness_on(real_client)
    backend = harness.backend
    backend.enqueue(tasks(3))
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=3)
    real_client.hset(backend.keys.store(hash_name), leases[1].task_id, b"garbage")
    harness.advance(LEASE * 2)
    assert backend.claim_expired(limit=10, claim_ttl=LEASE) == []
    counts = backend.counts()["default"]
    assert (counts.ready, counts.running) == (3, 0)
