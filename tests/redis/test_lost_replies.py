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
    assert backend.mark_started([lease]) == [True]  # a started claim: the reaper takes it
    backend.client.zadd(backend.keys.store("leases"), {lease.task_id: 0})  # long expired
    [reaped] = backend.claim_expired(limit=1, claim_ttl=LEASE)
    done = attrs.evolve(lease.record, status=TaskResultStatus.SUCCESSFUL)
    assert backend.complete(lease, done) is None
    assert backend.complete(reaped, done) is not None


def test_a_claim_whose_reply_was_lost_is_answered_with_the_same_leases(
    backend: RedisBackend,
) -> None:
    """A claim repeated after a lost reply returns the leases first granted and claims no more."""
    backend.enqueue(tasks(3))
    DroppingConnection.drop(scripts.load("claim").sha)
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=2)
    assert DroppingConnection.armed[scripts.load("claim").sha.encode()] == 0
    assert [lease.record.args for lease in leases] == [[0], [1]]
    counts = backend.counts()["default"]
    assert (counts.running, counts.ready) == (2, 1)
    assert all(backend.get(lease.task_id).attempts == 1 for lease in leases)  # type: ignore[union-attr]  # every task is stored
    done = [
        Decision(lease=lease, record=attrs.evolve(lease.record, status=TaskResultStatus.SUCCESSFUL))
        for lease in leases
    ]
    assert all(backend.decide_many(done)), "the repeated leases are the current ones"


def test_a_repeated_claim_across_queues_answers_each_lease_under_its_own_token(
    backend: RedisBackend,
) -> None:
    """The receipt keeps one base for the call's tokens, whatever the queues granted."""
    backend.enqueue(tasks(2, queue="a") + tasks(2, queue="b"))
    DroppingConnection.drop(scripts.load("claim").sha)
    leases = backend.claim(["a", "b"], worker="w", lease_ttl=LEASE, limit=3)
    assert DroppingConnection.armed[scripts.load("claim").sha.encode()] == 0
    assert [lease.record.queue for lease in leases] == ["a", "a", "b"]
    assert len({lease.token for lease in leases}) == 3
    done = [
        Decision(lease=lease, record=attrs.evolve(lease.record, status=TaskResultStatus.SUCCESSFUL))
        for lease in leases
    ]
    assert all(backend.decide_many(done)), "the repeated leases are the current ones"


def test_a_claim_that_loses_every_reply_raises_and_its_leases_lapse(backend: RedisBackend) -> None:
    """When every repeat of a claim loses its reply, RedisUnavailable is raised, applied once."""
    backend.enqueue(tasks(2))
    DroppingConnection.drop(scripts.load("claim").sha, times=3)
    with pytest.raises(RedisUnavailable) as info:
        backend.claim(["default"], worker="w", lease_ttl=LEASE)
    assert isinstance(info.value.__cause__, redis.ConnectionError)
    counts = backend.counts()["default"]
    assert (counts.running, counts.ready) == (1, 1), "applied once, not once per repeat"


def test_a_receipt_expires_with_the_leases_it_granted(backend: RedisBackend) -> None:
    """A claim's receipt lives no longer than its leases, and an empty claim leaves none."""
    backend.enqueue(tasks(1))
    backend.claim(["default"], worker="w", lease_ttl=timedelta(seconds=7))
    backend.claim(["default"], worker="w", lease_ttl=timedelta(seconds=7))  # nothing left
    receipts = list(backend.client.scan_iter(match=backend.keys.claim_receipt("*")))
    assert len(receipts) == 1
    assert 0 < backend.client.pttl(receipts[0]) <= 7000


def test_a_heartbeat_whose_reply_was_lost_is_repeated(backend: RedisBackend) -> None:
    """extend_many after a lost reply renews every lease, none reported lost."""
    backend.enqueue(tasks(2))
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=2)
    DroppingConnection.drop(scripts.load("extend_many").sha)
    renewed = backend.extend_many(leases, LEASE * 2)
    assert all(lease is not None for lease in renewed)
    assert [r.token for r in renewed if r] == [lease.token for lease in leases]


def test_start_marks_whose_reply_was_lost_are_repeated_and_answered_as_the_first_time(
    backend: RedisBackend,
) -> None:
    """mark_started after a lost reply answers True for every lease, and the marks hold."""
    backend.enqueue(tasks(2))
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=2)
    DroppingConnection.drop(scripts.load("mark_started").sha)
    assert backend.mark_started(leases) == [True, True]
    assert DroppingConnection.armed[scripts.load("mark_started").sha.encode()] == 0
    assert backend.release(leases) == [None, None], "the marks were recorded: nothing given back"
