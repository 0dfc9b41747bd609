"""Lost replies: a decision applied by the server, its reply lost, is recognised when repeated."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import attrs
import pytest
import redis

from tests.conftest import RedisServer
from tests.redis.conftest import DroppingConnection, instrumented_client, tasks
from threadmill_core.models import Decision, TaskResultStatus
from threadmill_redis import RedisBackend, RedisUnavailable, scripts
from threadmill_redis.testing import delete_namespace

pytestmark = pytest.mark.redis

LEASE = timedelta(minutes=5)


@pytest.fixture
def backend(redis_server: RedisServer) -> Iterator[RedisBackend]:
    client = instrumented_client(redis_server, DroppingConnection)
    built = RedisBackend(client, namespace="lost-replies")
    try:
        yield built
    finally:
        DroppingConnection.armed.clear()
        delete_namespace(built)
        client.connection_pool.disconnect()


def seq(backend: RedisBackend) -> int:
    """How many times a task entered READY in the namespace so far."""
    return int(backend.client.hget(backend.keys.store("counters"), "seq") or 0)


def test_a_complete_whose_reply_was_lost_is_repeated_and_answered_as_the_first_time(
    backend: RedisBackend,
) -> None:
    """The backend repeats a complete after a lost reply and gets the stored record back."""
    backend.enqueue(tasks(1))
    [lease] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    DroppingConnection.drop(scripts.load("complete").sha)
    done = attrs.evolve(lease.record, status=TaskResultStatus.SUCCESSFUL, return_value=[1, 2])
    stored = backend.complete(lease, done)
    assert stored is not None
    assert stored.status is TaskResultStatus.SUCCESSFUL
    assert stored.return_value == [1, 2]
    assert stored == backend.get(lease.task_id)
    assert DroppingConnection.armed[scripts.load("complete").sha.encode()] == 0


def test_a_retry_repeated_by_the_caller_after_lost_replies_is_applied_once(
    backend: RedisBackend,
) -> None:
    """When every repeat loses its reply too, the caller's repeat gets the record, applied once."""
    backend.enqueue(tasks(1))
    [lease] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    before = seq(backend)
    DroppingConnection.drop(scripts.load("retry").sha, times=3)
    with pytest.raises(RedisUnavailable):
        backend.retry(lease, lease.record, timedelta(0))
    again = backend.retry(lease, lease.record, timedelta(0))
    assert again is not None
    assert again.status is TaskResultStatus.READY
    assert again == backend.get(lease.task_id)
    assert seq(backend) == before + 1  # entered READY once, not once per repeat
    assert [r.id for r in backend.peek("default", TaskResultStatus.READY)] == [lease.task_id]


def test_a_batch_of_decisions_whose_reply_was_lost_is_recognised_per_decision(
    backend: RedisBackend,
) -> None:
    """A repeated decide_many answers every decision with its stored record, none refused."""
    backend.enqueue(tasks(3))
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=3)
    decisions = [
        Decision(
            lease=leases[0], record=attrs.evolve(leases[0].record, status=TaskResultStatus.FAILED)
        ),
        Decision(lease=leases[1], record=leases[1].record, retry_delay=timedelta(hours=1)),
        Decision(lease=leases[2], record=leases[2].record, retry_delay=timedelta(0)),
    ]
    DroppingConnection.drop(scripts.load("decide_many").sha)
    answers = backend.decide_many(decisions)
    assert [a.status if a else None for a in answers] == [
        TaskResultStatus.FAILED,
        TaskResultStatus.DEFERRED,
        TaskResultStatus.READY,
    ]
    assert answers == [backend.get(lease.task_id) for lease in leases]


def test_a_stale_token_is_still_refused_after_a_lost_reply(backend: RedisBackend) -> None:
    """Recognising repeats does not let a superseded lease decide: the reaper's token wins."""
    backend.enqueue(tasks(1))
    [lease] = backend.claim(["default"], worker="w", lease_ttl=timedelta(milliseconds=1))
    backend.client.zadd(backend.keys.store("leases"), {lease.task_id: 0})  # long expired
    [reaped] = backend.claim_expired(limit=1, claim_ttl=LEASE)
    done = attrs.evolve(lease.record, status=TaskResultStatus.SUCCESSFUL)
    assert backend.complete(lease, done) is None
    assert backend.complete(reaped, done) is not None


def test_a_claim_whose_reply_was_lost_is_not_repeated(backend: RedisBackend) -> None:
    """A lost claim reply raises RedisUnavailable instead of claiming a second task."""
    backend.enqueue(tasks(2))
    DroppingConnection.drop(scripts.load("claim").sha)
    with pytest.raises(RedisUnavailable) as info:
        backend.claim(["default"], worker="w", lease_ttl=LEASE)
    assert isinstance(info.value.__cause__, redis.ConnectionError)
    assert backend.counts()["default"].running == 1
    assert backend.counts()["default"].ready == 1
