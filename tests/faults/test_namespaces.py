"""Namespaces isolate: two on one server never see, claim, count or purge each other's tasks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta

import fakeredis
import pytest
import redis

from tests.conftest import RedisServer
from threadmill_core import TaskResult, TaskResultStatus
from threadmill_core.ids import new_task_id
from threadmill_redis import RedisBackend
from threadmill_redis.testing import advance, delete_namespace

READY, DEFERRED, RUNNING = (
    TaskResultStatus.READY,
    TaskResultStatus.DEFERRED,
    TaskResultStatus.RUNNING,
)
LEASE = timedelta(seconds=30)


@pytest.fixture(
    params=[
        pytest.param("fakeredis", marks=pytest.mark.fakeredis),
        pytest.param("redis", marks=pytest.mark.redis),
    ]
)
def client(request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    """A client of fakeredis or of the session's real redis-server."""
    if request.param == "fakeredis":
        yield fakeredis.FakeRedis()
        return
    server: RedisServer = request.getfixturevalue("redis_server")
    made = redis.Redis.from_url(server.url)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def namespace_on(client: redis.Redis) -> Iterator[Callable[[str], RedisBackend]]:
    """Backends on namespaces of one client; their keys are deleted afterwards."""
    built: list[RedisBackend] = []

    def make(namespace: str) -> RedisBackend:
        built.append(RedisBackend(client, namespace=namespace))
        return built[-1]

    yield make
    for backend in built:
        delete_namespace(backend)


def records(ids: list[str], tag: str, **fields: object) -> list[TaskResult]:
    return [TaskResult(id=i, task_path="app:work", args=[tag], **fields) for i in ids]  # type: ignore[arg-type]  # fields given as keywords, checked by the class


def test_two_namespaces_keep_apart_even_with_the_same_ids_and_queues(
    namespace_on: Callable[[str], RedisBackend],
) -> None:
    """The same ids in the same queues of two namespaces are two sets of tasks, each left alone."""
    a, b = namespace_on("iso-a"), namespace_on("iso-b")
    ids = [new_task_id() for _ in range(4)]
    a.enqueue(records(ids, "a"))
    b.enqueue(records(ids, "b"))
    b.enqueue(records([new_task_id()], "b", run_after=b.now() + timedelta(seconds=10)))

    assert a.counts()["default"].ready == 4
    assert (b.counts()["default"].ready, b.counts()["default"].deferred) == (4, 1)
    assert [r.args for r in a.peek("default", READY)] == [["a"]] * 4

    claimed = a.claim(["default"], worker="wa", lease_ttl=LEASE, limit=10)
    assert [lease.record.args for lease in claimed] == [["a"]] * 4
    assert a.mark_started(claimed) == [True] * 4
    assert b.mark_started(claimed) == [False] * 4, "a's leases mean nothing in b"
    assert b.counts()["default"].ready == 4, "b's tasks were not claimed"
    assert {r.status for r in (b.get(i) for i in ids) if r} == {READY}

    # Expired leases and due tasks in b are b's own business.
    b_leases = b.claim(["default"], worker="wb", lease_ttl=LEASE, limit=2)
    assert b.mark_started(b_leases) == [True] * 2
    advance(a, LEASE * 2)
    advance(b, LEASE * 2)
    assert {lease.task_id for lease in a.claim_expired(limit=10, claim_ttl=LEASE)} == set(ids)
    assert a.promote_due(limit=10) == 0
    assert b.counts()["default"].running == 2
    assert b.counts()["default"].deferred == 1
    assert {lease.task_id for lease in b.claim_expired(limit=10, claim_ttl=LEASE)} == {
        lease.task_id for lease in b_leases
    }

    # Operator actions through a never reach b.
    b_only = b.enqueue(records([new_task_id()], "b"))[0].id
    assert a.get(b_only) is None
    assert a.cancel(b_only) is None
    assert a.requeue(b_only) is None
    assert a.purge("default", READY) == 0  # a's READY is empty; b's stays
    assert b.counts()["default"].ready == 3
    assert b.purge("default", DEFERRED) == 1
    assert a.counts()["default"].running == 4


@pytest.mark.parametrize(
    ("first", "second"), [("ns*", "nsx"), ("ns", "ns:sub"), ("a?c", "abc"), ("[x]", "x")]
)
def test_namespaces_that_look_alike_or_are_glob_patterns_stay_apart(
    namespace_on: Callable[[str], RedisBackend], first: str, second: str
) -> None:
    """Namespaces whose names prefix or pattern-match each other share no keys."""
    one, two = namespace_on(first), namespace_on(second)
    one.enqueue(records([new_task_id()], first))
    two.enqueue(records([new_task_id(), new_task_id()], second))
    assert (one.counts()["default"].ready, two.counts()["default"].ready) == (1, 2)
    mine = set(one.client.scan_iter(match=one.keys.pattern()))
    theirs = set(two.client.scan_iter(match=two.keys.pattern()))
    assert mine
    assert theirs
    assert not mine & theirs
    delete_namespace(one)
    assert two.counts()["default"].ready == 2, "deleting one namespace left the other whole"
