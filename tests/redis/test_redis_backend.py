"""Redis-specific behaviour: one clock, one hash slot, exact ordering, expiry and poison."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta

import attrs
import pytest
import redis
from redis.crc import key_slot

from tests.redis.conftest import RESULT_TTL, tasks
from threadmill_core.clock import from_ms
from threadmill_core.errors import PayloadError
from threadmill_core.models import Decision, TaskResultStatus
from threadmill_core.testing import Harness
from threadmill_redis import RedisBackend, replies

LEASE = timedelta(minutes=5)
READY, DEFERRED = TaskResultStatus.READY, TaskResultStatus.DEFERRED


def finish(
    backend: RedisBackend, count: int, queue: str = "default", *, mark: bool = False
) -> None:
    """Claim and complete `count` READY tasks of `queue` as SUCCESSFUL (marked started first,
    with `mark`)."""
    leases = backend.claim([queue], worker="w", lease_ttl=LEASE, limit=count)
    if mark:
        assert backend.mark_started(leases) == [True] * len(leases)
    done = TaskResultStatus.SUCCESSFUL
    backend.decide_many(
        [Decision(lease=x, record=attrs.evolve(x.record, status=done)) for x in leases]
    )


@pytest.mark.redis
def test_a_client_clock_hours_off_changes_nothing(
    harness_on: Callable[..., Harness], real_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Timestamps, leases and retry delays follow the server's TIME, not the client's clock."""
    backend = harness_on(real_client).backend
    server_now = backend.now()
    real_time, real_time_ns = time.time, time.time_ns
    monkeypatch.setattr(time, "time", lambda: real_time() + 5 * 3600)
    monkeypatch.setattr(time, "time_ns", lambda: real_time_ns() + 5 * 3600 * 10**9)
    [record] = backend.enqueue(tasks(1))
    assert record.enqueued_at is not None
    assert abs(record.enqueued_at - server_now) < timedelta(minutes=1)
    [lease] = backend.claim(["default"], worker="w", lease_ttl=timedelta(seconds=30))
    assert abs(lease.deadline - server_now - timedelta(seconds=30)) < timedelta(minutes=1)
    assert backend.claim_expired(limit=10, claim_ttl=LEASE) == []
    retried = backend.retry(lease, lease.record, timedelta(seconds=60))
    assert retried is not None
    assert retried.run_after is not None
    assert abs(retried.run_after - server_now - timedelta(seconds=60)) < timedelta(minutes=1)
    assert backend.promote_due(limit=10) == 0


def test_every_key_of_a_namespace_is_in_one_cluster_slot(harness: Harness) -> None:
    """After a workload over several queues, every key the namespace left shares one hash slot."""
    backend = harness.backend
    for queue in ("default", "emails:outbound", "{odd} queue ü"):
        backend.enqueue(tasks(3, queue=queue))
        backend.enqueue(tasks(1, queue=queue, run_after=backend.now() + timedelta(hours=1)))
        finish(backend, 1, queue)
        [lease] = backend.claim([queue], worker="w", lease_ttl=LEASE)
        backend.retry(lease, lease.record, timedelta(0))
    backend.cancel(backend.peek("default", READY)[0].id)
    backend.wait_for_tasks(["default"], timedelta(milliseconds=1))
    keys = [k.decode() for k in backend.client.keys("*") if b"{" + b"threadmill-test" in k]
    ours = [k for k in keys if k.startswith(backend.keys.prefix)]
    assert len(ours) >= 10
    assert {key_slot(k.encode()) for k in ours} == {key_slot(backend.keys.prefix.encode())}


def test_fifo_within_a_priority_is_strict_for_thousands_enqueued_at_once(harness: Harness) -> None:
    """1000 tasks enqueued in one call (one millisecond) come out in enqueue order, by priority."""
    backend = harness.backend
    records = tasks(1000, priority=0) + tasks(5, priority=100) + tasks(5, priority=-100)
    backend.enqueue(records)
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=1010)
    expected = records[1000:1005] + records[:1000] + records[1005:]
    assert [lease.task_id for lease in leases] == [r.id for r in expected]


def test_values_travel_unchanged(harness: Harness) -> None:
    """Large ints, floats, empty containers and unicode come back value for value, in order."""
    args = [2**80, -(2**63), 0.1, 1e300, [], {}, "日本語 🚀", {"b": 1, "a": [None, True]}]
    [record] = harness.backend.enqueue(tasks(1))
    [record] = harness.backend.enqueue([attrs.evolve(record, id=record.id + "x", args=args)])
    [lease] = harness.backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=2)[1:]
    assert lease.record.args == args
    assert list(lease.record.args[7]) == ["b", "a"]


def test_results_expire_and_memory_stays_bounded_under_steady_load(
    harness_on: Callable[..., Harness], client: redis.Redis
) -> None:
    """Finished tasks are gone after result_ttl, and their data is deleted as new tasks finish,
    their recorded starts included."""
    harness = harness_on(client, prune_batch=50)
    backend = harness.backend
    state, starts = backend.keys.store("state"), backend.keys.store("starts")
    sizes = []
    for round_ in range(8):
        backend.enqueue(tasks(20))
        finish(backend, 20, mark=round_ % 2 == 0)
        harness.advance(RESULT_TTL / 2 + timedelta(minutes=1))
        sizes.append(client.hlen(state))
        assert client.hlen(starts) <= client.hlen(state)
    # Results of the last round or two are live; older ones were pruned by later completions.
    assert max(sizes) <= 60
    assert backend.counts()["default"].successful <= 20
    first = backend.peek("default", TaskResultStatus.SUCCESSFUL)[0]
    harness.advance(RESULT_TTL)
    assert backend.get(first.id) is None  # expired reads as gone before any prune ran
    assert backend.peek("default", TaskResultStatus.SUCCESSFUL) == []
    assert backend.counts() == {}
    assert backend.promote_due(limit=1) == 0  # maintenance prunes the rest
    assert client.hlen(state) == 0
    assert client.hlen(starts) == 0
    assert client.zcard(backend.keys.store("successful")) == 0


def test_poison_is_quarantined_and_the_claim_is_filled_from_the_rest(harness: Harness) -> None:
    """Undecodable payloads are finalized FAILED with TaskQuarantined; the batch goes on."""
    backend = harness.backend
    records = backend.enqueue(tasks(4))
    payload = backend.keys.store("payload")
    backend.client.hset(payload, records[0].id, b"\xff not json")
    backend.client.hset(payload, records[2].id, backend.client.hget(payload, records[1].id))
    with pytest.raises(PayloadError, match=records[0].id):
        backend.get(records[0].id)
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=2)
    assert [lease.task_id for lease in leases] == [records[1].id, records[3].id]
    for poisoned in (records[0], records[2]):
        stored = backend.get(poisoned.id)
        assert stored is not None
        assert stored.status is TaskResultStatus.FAILED
        assert stored.task_path == ""
        [error] = stored.errors
        assert error.exception_class_path == "threadmill_core.errors.TaskQuarantined"
        assert poisoned.id in error.message
    assert backend.counts()["default"].failed == 2
    assert backend.purge("default", TaskResultStatus.FAILED) == 2


@pytest.mark.parametrize(
    ("store", "corrupt"),
    [
        ("workers", lambda stored: b"x:w"),
        ("state", lambda stored: stored.replace(b"|0|", b"|zero|", 1)),
        (
            "state",
            lambda stored: b"|".join([*stored.split(b"|")[:4], b"soon", *stored.split(b"|")[5:]]),
        ),
    ],
    ids=["worker ids", "attempts", "enqueued_at"],
)
def test_bad_stored_fields_name_the_task_every_time_they_are_read(
    harness: Harness, store: str, corrupt: Callable[[bytes], bytes]
) -> None:
    """Decoded fields are remembered by their bytes; bad bytes never are, good ones read alike."""
    backend = harness.backend
    [bad, good] = backend.enqueue(tasks(2))
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=2)
    key = backend.keys.store(store)
    stored = backend.client.hget(key, bad.id)
    backend.client.hset(key, bad.id, corrupt(stored))
    for _ in range(2):
        with pytest.raises(PayloadError, match=bad.id):
            backend.get(bad.id)
    assert backend.get(good.id) == leases[1].record
    backend.client.hset(key, bad.id, stored)
    assert backend.get(bad.id) == leases[0].record


def test_empty_stored_times_read_as_none() -> None:
    """Empty fields of a stored state, and an empty workers entry, read as none."""
    state = replies.parse_state(b"READY|0|0|1|1700000000000|||||||default")
    assert state.enqueued_at == from_ms(1_700_000_000_000)
    assert (state.run_after, state.started_at, state.deadline, state.token) == (None,) * 4
    assert replies.decode_workers(b"") == ()


def test_poison_found_by_the_reaper_is_quarantined_too(harness: Harness) -> None:
    """A running task whose payload went bad is never handed to the reaper."""
    backend = harness.backend
    backend.enqueue(tasks(2))
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=2)
    assert backend.mark_started(leases) == [True, True]
    backend.client.hset(backend.keys.store("errors"), leases[0].task_id, b"[{")
    harness.advance(LEASE * 2)
    [reaped] = backend.claim_expired(limit=2, claim_ttl=LEASE)
    assert reaped.task_id == leases[1].task_id
    assert backend.counts()["default"].failed == 1


def test_poison_whose_unstarted_claim_expired_goes_back_and_the_next_claim_quarantines_it(
    harness: Harness,
) -> None:
    """The reaper's Lua gives an unstarted claim back without decoding it; claim() then
    finalizes the poison FAILED and hands out the healthy task instead."""
    backend = harness.backend
    backend.enqueue(tasks(2))
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=2)
    backend.client.hset(backend.keys.store("errors"), leases[0].task_id, b"[{")
    harness.advance(LEASE * 2)
    assert backend.claim_expired(limit=2, claim_ttl=LEASE) == []
    assert backend.counts()["default"].ready == 2
    [healthy] = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=2)
    assert healthy.task_id == leases[1].task_id
    assert backend.counts()["default"].failed == 1


def test_an_operator_can_count_and_purge_poison_but_not_read_it(harness: Harness) -> None:
    """counts() and purge() never decode; get and peek name the poisoned task."""
    backend = harness.backend
    [record] = backend.enqueue(tasks(1))
    backend.client.hset(backend.keys.store("payload"), record.id, b"{}")
    assert backend.counts()["default"].ready == 1
    with pytest.raises(PayloadError, match=record.id):
        backend.peek("default", READY)
    assert backend.purge("default", READY) == 1
    assert backend.get(record.id) is None


def test_purge_takes_big_segments_in_batches(
    harness_on: Callable[..., Harness], client: redis.Redis
) -> None:
    """A segment larger than purge_batch is purged completely, counting every task once."""
    backend = harness_on(client, purge_batch=7).backend
    backend.enqueue(tasks(30, run_after=backend.now() + timedelta(hours=1)))
    backend.enqueue(tasks(3))
    assert backend.purge("default", DEFERRED) == 30
    assert backend.counts()["default"].deferred == 0
    assert backend.counts()["default"].ready == 3


def test_an_idle_wait_wakes_when_a_task_is_enqueued(harness: Harness) -> None:
    """wait_for_tasks returns well before its timeout once a task is enqueued to its queues."""
    backend = harness.backend
    timer = threading.Timer(0.2, backend.enqueue, [tasks(1, queue="b")])
    timer.start()
    started = time.monotonic()
    try:
        backend.wait_for_tasks(["a", "b"], timedelta(seconds=30))
    finally:
        timer.join()
    assert time.monotonic() - started < 10


def test_a_retry_and_a_requeue_wake_idle_workers(harness: Harness) -> None:
    """A zero-delay retry and a requeue each leave a wake-up for the task's queue."""
    backend = harness.backend
    backend.enqueue(tasks(1))
    [lease] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    notify = backend.keys.notify("default")
    backend.client.delete(notify)
    backend.retry(lease, lease.record, timedelta(0))
    assert backend.client.llen(notify) == 1
    backend.cancel(lease.task_id)
    backend.requeue(lease.task_id)
    assert backend.client.llen(notify) == 2
    backend.enqueue(tasks(500))
    assert backend.client.llen(notify) == backend.options.notify_cap


def test_start_recorded_reads_the_current_claims_mark(harness: Harness) -> None:
    """The test helper sees a mark of the current claim only, not of an earlier one."""
    from threadmill_redis.testing import start_recorded

    backend = harness.backend
    [record] = backend.enqueue(tasks(1))
    [lease] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    assert not start_recorded(backend, record.id)
    assert backend.mark_started([lease]) == [True]
    assert start_recorded(backend, record.id)
    backend.retry(lease, lease.record, timedelta(0))
    backend.claim(["default"], worker="w", lease_ttl=LEASE)
    assert not start_recorded(backend, record.id), "a new claim starts unrecorded"
