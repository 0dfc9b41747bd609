"""At Redis's maxmemory (noeviction): workers keep draining, enqueue is refused, and a long
batch refused part way names what it stored, so resending duplicates nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import attrs
import pytest
import redis

from tests.faults.servers import Server
from tests.redis.conftest import tasks
from threadmill_core.models import Decision, TaskResultStatus
from threadmill_redis import RedisBackend
from threadmill_redis.errors import PartlyEnqueued, RedisUnavailable

pytestmark = pytest.mark.redis

LEASE = timedelta(minutes=5)
SUCCESSFUL = TaskResultStatus.SUCCESSFUL


@pytest.fixture
def server() -> Iterator[Server]:
    """A server of this test's own, whose maxmemory the test sets."""
    server = Server("--maxmemory-policy", "noeviction")
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def admin(server: Server) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(server.url)
    try:
        yield client
    finally:
        client.close()


def used_memory(admin: redis.Redis) -> int:
    return int(admin.info("memory")["used_memory"])


def fill_until_refused(backend: RedisBackend) -> int:
    """Enqueue in small batches until Redis refuses for memory; how many were stored."""
    stored, refusal = 0, None
    while refusal is None:
        try:
            backend.enqueue(tasks(100))
            stored += 100
        except RedisUnavailable as exc:
            refusal = str(exc)
    assert "out of memory" in refusal
    assert "changed nothing" in refusal
    return stored


def test_a_worker_at_maxmemory_drains_the_queue_and_enqueue_is_refused(
    server: Server, admin: redis.Redis
) -> None:
    """Over maxmemory, claims, start marks, heartbeats and acknowledgements all go through
    until the queue is empty, while enqueue is refused with an error saying why; once
    finished results are purged, memory is lower than at the start and enqueue works."""
    admin.config_set("maxmemory", used_memory(admin) + 1_000_000)
    backend = RedisBackend.from_url(server.url, namespace="full")
    waiting = fill_until_refused(backend)
    assert waiting > 500
    full = used_memory(admin)
    drained = 0
    while leases := backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=50):
        assert backend.mark_started(leases) == [True] * len(leases)
        assert all(backend.extend_many(leases, LEASE))
        done = backend.decide_many(
            [Decision(lease=x, record=attrs.evolve(x.record, status=SUCCESSFUL)) for x in leases]
        )
        assert all(record is not None for record in done)
        drained += len(leases)
        with pytest.raises(RedisUnavailable, match="out of memory"):
            backend.enqueue(tasks(1))
    assert drained == waiting
    assert backend.counts()["default"].successful == waiting
    assert backend.purge("default", SUCCESSFUL) == waiting
    assert used_memory(admin) < full
    assert len(backend.enqueue(tasks(100))) == 100
    backend.close()


def test_a_batch_refused_part_way_names_what_it_stored_and_resending_duplicates_nothing(
    server: Server, admin: redis.Redis
) -> None:
    """A 2,000-task batch that runs out of memory after its first calls raises PartlyEnqueued
    naming the ids stored and not; resent once memory is freed, every task is stored once."""
    backend = RedisBackend.from_url(server.url, namespace="batch")
    for _ in range(40):  # memory an operator can free, in pieces: a client's input
        admin.append("ballast", b"x" * 100_000)  # buffer counts as used memory too
    time.sleep(0.2)  # until the server has shrunk that buffer again
    # Room for the batch as it arrives and its first call of 500 tasks, none for the second.
    admin.config_set("maxmemory", used_memory(admin) + 400_000)
    batch = tasks(2000)
    with pytest.raises(PartlyEnqueued) as refused:
        backend.enqueue(batch)
    error = refused.value
    assert isinstance(error, RedisUnavailable)
    ids = [record.id for record in batch]
    assert 0 < len(error.stored) < 2000
    assert list(error.stored) + list(error.not_stored) == ids
    assert [ids[i] for i in error.not_stored_indexes] == list(error.not_stored)
    assert backend.counts()["default"].ready == len(error.stored)

    admin.delete("ballast")
    stored = backend.enqueue(batch)
    assert [record.id for record in stored] == ids
    counts = backend.counts()["default"]
    assert counts.ready == 2000
    assert len(backend.peek("default", TaskResultStatus.READY, limit=3000)) == 2000
    backend.close()
