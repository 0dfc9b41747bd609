"""Round trips: enqueues, batches of claims, reaps and decisions, and idle waits cost a few."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import attrs
import pytest
import redis

from tests.conftest import RedisServer
from tests.core import tasks as core_tasks
from tests.redis.conftest import CountingConnection, instrumented_client, tasks
from threadmill_core import Broker
from threadmill_core.models import Decision, TaskResultStatus
from threadmill_redis import RedisBackend, scripts
from threadmill_redis.testing import advance, delete_namespace

pytestmark = pytest.mark.redis

LEASE = timedelta(minutes=5)


@pytest.fixture
def backend(redis_server: RedisServer) -> Iterator[RedisBackend]:
    client = instrumented_client(redis_server, CountingConnection)
    built = RedisBackend(client, namespace="round-trips")
    try:
        yield built
    finally:
        delete_namespace(built)
        client.connection_pool.disconnect()


class Trips:
    """Counts the round trips of one block of calls."""

    def __enter__(self) -> Trips:
        self.start = CountingConnection.sent
        return self

    def __exit__(self, *exc: object) -> None:
        self.count = CountingConnection.sent - self.start


def warm_up(backend: RedisBackend) -> None:
    """Open the connection the scripts use and load the enqueue script: one-time costs."""
    backend.get("no such task")
    backend.client.script_load(scripts.load("enqueue").source)


def costs(backend: RedisBackend, n: int) -> dict[str, int]:
    """Round trips of each batch operation on `n` tasks."""
    spent: dict[str, int] = {}
    with Trips() as trips:
        backend.enqueue(tasks(n, run_after=backend.now() + timedelta(hours=1)))
    spent["enqueue"] = trips.count - 1  # one of them was now()
    advance(backend, timedelta(hours=2))
    with Trips() as trips:
        assert backend.promote_due(limit=n) == n
    spent["promote_due"] = trips.count
    with Trips() as trips:
        leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=n)
    spent["claim"] = trips.count
    with Trips() as trips:
        assert all(backend.extend_many(leases, LEASE))
    spent["extend_many"] = trips.count
    with Trips() as trips:
        assert all(backend.mark_started(leases))
    spent["mark_started"] = trips.count
    advance(backend, LEASE * 2)
    with Trips() as trips:
        reaped = backend.claim_expired(limit=n, claim_ttl=LEASE)
    spent["claim_expired"] = trips.count
    decisions = [
        Decision(lease=x, record=attrs.evolve(x.record, status=TaskResultStatus.FAILED))
        if i % 2
        else Decision(lease=x, record=x.record, retry_delay=timedelta(seconds=i % 3))
        for i, x in enumerate(reaped)
    ]
    with Trips() as trips:
        assert all(backend.decide_many(decisions))
    spent["decide_many"] = trips.count
    assert len(leases) == len(reaped) == n
    return spent


def test_batches_of_a_hundred_cost_as_many_round_trips_as_batches_of_one(
    backend: RedisBackend,
) -> None:
    """Each batch operation takes the same constant number of round trips for 1 and 100 tasks."""
    costs(backend, 1)  # open the connection and load the scripts: one-time costs
    for status in (TaskResultStatus.READY, TaskResultStatus.DEFERRED, TaskResultStatus.FAILED):
        backend.purge("default", status)
    one = costs(backend, 1)
    for status in (TaskResultStatus.READY, TaskResultStatus.DEFERRED, TaskResultStatus.FAILED):
        backend.purge("default", status)
    hundred = costs(backend, 100)
    assert one == hundred
    assert hundred == {
        "enqueue": 1,
        "promote_due": 2,  # the script, then waking the queues it filled
        "claim": 1,
        "extend_many": 1,
        "mark_started": 1,
        "claim_expired": 1,
        "decide_many": 1,
    }


def test_a_reaper_pass_gives_back_any_number_of_unstarted_claims_in_two_round_trips(
    backend: RedisBackend,
) -> None:
    """A dead worker's whole prefetch goes back in one script, then one pipeline of wake-ups."""
    spent = []
    for n in (1, 100):
        backend.enqueue(tasks(n))
        backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=n)
        advance(backend, LEASE * 2)
        with Trips() as trips:
            assert backend.claim_expired(limit=1, claim_ttl=LEASE) == []
        spent.append(trips.count)
        assert backend.counts()["default"].ready == n
        backend.purge("default", TaskResultStatus.READY)
    assert spent == [2, 2]  # the script, then waking the queues it filled


class Overlapping(redis.Connection):
    """Records, in order, each command sent and each reply read."""

    events: list[str] = []  # noqa: RUF012 - shared on purpose: the pool makes the instances

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        type(self).events.append("send")
        super().send_packed_command(command, check_health)

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        type(self).events.append("read")
        return super().read_response(*args, **kwargs)


def test_an_enqueue_waits_for_one_reply_and_answers_what_get_reads(
    redis_server: RedisServer,
) -> None:
    """One task is one round trip; the calls of a long batch are pipelined; each answer equals get.

    Each call of a long batch is sent before the reply to the one before is
    read, so the client waits for one reply at a time while the server works.
    """
    client = instrumented_client(redis_server, Overlapping)
    backend = RedisBackend(client, namespace="round-trips-enqueue", enqueue_batch=3)
    try:
        warm_up(backend)
        Overlapping.events.clear()
        [one] = backend.enqueue(tasks(1))
        assert Overlapping.events == ["send", "read"]
        assert one == backend.get(one.id)
        assert one.status is TaskResultStatus.READY
        assert one.enqueued_at is not None

        now = backend.now()
        fresh = [
            *tasks(2, queue="other", priority=7),
            *tasks(1, run_after=now + timedelta(hours=1)),  # DEFERRED
            *tasks(1, run_after=now - timedelta(hours=1)),  # READY, its run_after kept
            *tasks(1, run_after=now + timedelta(hours=1, microseconds=1500)),  # stored in ms
        ]
        sent = [*fresh, tasks(1)[0], fresh[0], attrs.evolve(one, args=["changed"])]
        Overlapping.events.clear()
        got = backend.enqueue(sent)  # three batches of three
        assert Overlapping.events == ["send", "send", "read", "send", "read", "read"]
        assert got == [backend.get(record.id) for record in sent]
        assert [record.status for record in got[:5]] == [
            TaskResultStatus.READY,
            TaskResultStatus.READY,
            TaskResultStatus.DEFERRED,
            TaskResultStatus.READY,
            TaskResultStatus.DEFERRED,
        ]
        assert got[6] == got[0]  # an id given twice answers with the first's record
        assert got[7] == one  # a stored id answers with the stored record
        assert {q: c.pending for q, c in backend.counts().items()} == {"default": 5, "other": 2}
    finally:
        delete_namespace(backend)
        client.connection_pool.disconnect()


def test_a_broker_enqueue_is_one_round_trip(backend: RedisBackend) -> None:
    """Broker.enqueue of a task without a delay sends one script call and nothing else."""
    broker = Broker(backend)
    warm_up(backend)
    with Trips() as trips:
        record = broker.enqueue(core_tasks.add, 1, 2)
    assert trips.count == 1
    assert record == broker.get_result(record.id)
    assert (record.queue, record.priority, record.args) == ("other", 5, [1, 2])


def test_an_idle_wait_costs_few_commands_and_an_enqueue_wakes_it_promptly(
    backend: RedisBackend, redis_server: RedisServer
) -> None:
    """An idle wait is one blocking command, and a task enqueued meanwhile ends it early."""
    warm_up(backend)  # the wait blocks on the thread's connection, which the scripts use
    with Trips() as trips:
        started = time.monotonic()
        backend.wait_for_tasks(["default", "other"], timedelta(seconds=1.5))
        waited = time.monotonic() - started
    assert trips.count <= 2  # BLPOP blocks under the 5 s socket timeout: one per wait
    assert waited >= 1.0

    producer = RedisBackend.from_url(redis_server.url, namespace="round-trips")
    timer = threading.Timer(0.2, producer.enqueue, [tasks(1, queue="other")])
    timer.start()
    try:
        with Trips() as trips:
            started = time.monotonic()
            backend.wait_for_tasks(["default", "other"], timedelta(seconds=30))
            waited = time.monotonic() - started
    finally:
        timer.join()
        producer.close()
    assert waited < 10  # woken by the enqueue, far before the 30 s timeout
    assert trips.count <= 2
    assert backend.claim(["other"], worker="w", lease_ttl=LEASE) != []


def test_a_wait_longer_than_the_socket_timeout_blocks_in_pieces(redis_server: RedisServer) -> None:
    """A wait blocks less than the socket timeout at a time, so it is not taken for a dead link."""
    backend = RedisBackend.from_url(f"{redis_server.url}?socket_timeout=1.2", namespace="pieces")
    try:
        started = time.monotonic()
        backend.wait_for_tasks(["default"], timedelta(seconds=1.5))
        assert time.monotonic() - started >= 1.0
    finally:
        backend.close()
