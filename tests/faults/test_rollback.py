"""Fencing across a rollback of Redis's data: a token is never issued twice for a task.

A restore from a snapshot (or a failover to a replica that had not received
the last writes) brings back the token counter as it was, so a counter alone
would hand the tasks claimed since then out again under the same tokens.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import attrs
import pytest
import redis

from tests.faults.servers import Server
from tests.redis.conftest import tasks
from threadmill_core.models import Decision, Lease, TaskResultStatus
from threadmill_redis import RedisBackend

pytestmark = pytest.mark.redis

LEASE = timedelta(minutes=5)


@pytest.fixture
def server() -> Iterator[Server]:
    """A server of this test's own, whose data a test may roll back to a snapshot (dump.rdb)."""
    server = Server()
    try:
        yield server
    finally:
        server.close()


def succeeded(lease: Lease) -> Decision:
    return Decision(
        lease=lease, record=attrs.evolve(lease.record, status=TaskResultStatus.SUCCESSFUL)
    )


def test_after_a_snapshot_restore_tasks_get_new_tokens_and_the_stale_holder_is_refused(
    server: Server,
) -> None:
    """Tasks claimed after a snapshot and claimed again once it is restored get tokens they
    never had; the first holder's heartbeats, start marks and acknowledgements are refused."""
    first = RedisBackend.from_url(server.url, namespace="rollback")
    first.enqueue(tasks(8))
    # Earlier claims, so the counter the snapshot keeps is not zero.
    for lease in first.claim(["default"], worker="a", lease_ttl=LEASE, limit=2):
        assert first.decide_many([succeeded(lease)]) != [None]
    snapshot = redis.Redis.from_url(server.url)
    snapshot.save()  # dump.rdb: what a restore brings back
    snapshot.close()
    stale = first.claim(["default"], worker="a", lease_ttl=LEASE, limit=6)
    assert len(stale) == 6
    assert first.mark_started(stale) == [True] * 6

    server.kill()  # nothing since the SAVE is kept: no AOF, no save points
    server.start()

    second = RedisBackend.from_url(server.url, namespace="rollback")
    fresh = second.claim(["default"], worker="b", lease_ttl=LEASE, limit=6)
    assert sorted(x.task_id for x in fresh) == sorted(x.task_id for x in stale)
    by_id = {lease.task_id: lease for lease in stale}
    for lease in fresh:
        old = by_id[lease.task_id]
        assert lease.record.attempts == old.record.attempts  # the same attempt, as restored
        assert lease.token != old.token
    assert second.mark_started(fresh[:3]) == [True] * 3

    first = RedisBackend.from_url(server.url, namespace="rollback")  # reconnected
    assert first.extend_many(stale, LEASE) == [None] * 6
    assert first.mark_started(stale[3:]) == [False] * 3
    assert first.decide_many([succeeded(lease) for lease in stale]) == [None] * 6
    done = second.decide_many([succeeded(lease) for lease in fresh])
    assert all(record is not None for record in done)
    assert second.counts()["default"].successful == 8
    first.close()
    second.close()
