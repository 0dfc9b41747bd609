"""Telemetry on Redis (`RedisBackend.rates`): what counts, the window, a bounded history, the cost.

The scripts count on the server's clock, which tests cannot set; the
harness's `advance` ages the telemetry with everything else (it moves every
bucket back by whole seconds), so windows and history are tested by moving
time, with a few seconds' margin for the real clock creeping meanwhile.
"""

from __future__ import annotations

import collections
import re
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from importlib import resources

import attrs
import pytest
import redis

from tests.redis.conftest import script_commands, tasks
from threadmill_core.backend import RATE_BUCKET_MAX, RATE_HISTORY
from threadmill_core.models import Decision, Lease, QueueRates, TaskError, TaskResultStatus
from threadmill_core.testing import Harness
from threadmill_redis import RedisBackend
from threadmill_redis.testing import advance, delete_namespace

MINUTE = timedelta(minutes=1)
LEASE = timedelta(minutes=5)
SUCCESSFUL, FAILED = TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED

#: Runs a function and counts, by name, the commands its scripts sent to telemetry keys.
Cost = Callable[[Callable[[], object]], collections.Counter[str]]


def redis_backend(harness: Harness) -> RedisBackend:
    assert isinstance(harness.backend, RedisBackend)
    return harness.backend


def finish(backend: RedisBackend, status: TaskResultStatus, queue: str = "default") -> None:
    """Claim one task of `queue` and complete it as `status`."""
    (lease,) = backend.claim([queue], worker="w", lease_ttl=LEASE)
    error = TaskError(exception_class_path="builtins.ValueError", message="no")
    assert backend.complete(lease, attrs.evolve(lease.record, status=status, errors=(error,)))


def entered(backend: RedisBackend, window: timedelta = MINUTE, queue: str = "default") -> int:
    rates = backend.rates(window)
    assert rates is not None
    return rates[queue].entered if queue in rates else 0


def telemetry(backend: RedisBackend) -> tuple[int, int]:
    """How many (bucket, queue) pairs the index holds, and how many counters the hash."""
    keys = backend.keys
    return (
        backend.client.zcard(keys.store("rate_index")),
        backend.client.hlen(keys.store("rates")),
    )


def test_the_buckets_in_lua_are_those_the_core_allows() -> None:
    """lib/rate_bucket.lua keeps RATE_HISTORY of buckets no longer than RATE_BUCKET_MAX."""
    lua = resources.files("threadmill_redis").joinpath("lua", "lib", "rate_bucket.lua")
    match = re.search(r"return math\.floor\(now / (\d+)\), (\d+)", lua.read_text())
    assert match is not None
    bucket = timedelta(milliseconds=int(match.group(1)))
    assert bucket <= RATE_BUCKET_MAX
    assert bucket * int(match.group(2)) == RATE_HISTORY


def test_an_idle_namespace_answers_an_empty_mapping(harness: Harness) -> None:
    """Redis keeps telemetry: nothing counted yet is {} (zero), not None (unknown)."""
    assert harness.backend.rates(MINUTE) == {}


@pytest.mark.parametrize("window", [timedelta(0), timedelta(seconds=-1), 60])
def test_a_window_must_be_a_positive_timedelta(harness: Harness, window: object) -> None:
    """A window that is not a positive timedelta is a ValueError, before Redis is asked."""
    with pytest.raises(ValueError, match="window must be a positive timedelta"):
        harness.backend.rates(window)  # type: ignore[arg-type]  # the bad argument under test


def test_enqueue_and_requeue_enter_and_terminal_states_finish(harness: Harness) -> None:
    """Entering counts new ids and requeues; finishing counts SUCCESSFUL, FAILED and CANCELLED."""
    backend = redis_backend(harness)
    records = tasks(5) + tasks(1, queue="other")
    backend.enqueue(records)
    backend.enqueue(records[:2])  # repeats of stored ids enter nothing
    finish(backend, SUCCESSFUL)
    finish(backend, FAILED)
    assert backend.cancel(records[4].id)
    assert backend.requeue(records[1].id)
    (lease,) = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    assert backend.retry(lease, lease.record, timedelta(seconds=5))  # a retry is neither
    harness.advance(timedelta(seconds=5))
    assert backend.promote_due(limit=10) == 1  # nor a promotion
    assert backend.purge("other", TaskResultStatus.READY) == 1  # nor a purge

    rates = backend.rates(MINUTE)
    assert rates == {
        "default": QueueRates(queue="default", window=MINUTE, entered=6, finished=3),
        "other": QueueRates(queue="other", window=MINUTE, entered=1, finished=0),
    }
    assert rates["default"].ingress == pytest.approx(0.1)
    assert rates["default"].egress == pytest.approx(0.05)


def test_decisions_in_batches_and_by_the_reaper_count_once(harness: Harness) -> None:
    """decide_many counts what it finalizes, the reaper's FAILED too; a repeated decision not."""
    backend = redis_backend(harness)
    backend.enqueue(tasks(4) + tasks(2, queue="b"))
    leases = backend.claim(["default", "b"], worker="w", lease_ttl=LEASE, limit=6)
    assert all(backend.mark_started(leases))  # started: expired ones go to the reaper
    decisions = [
        Decision(lease=leases[0], record=attrs.evolve(leases[0].record, status=SUCCESSFUL)),
        Decision(lease=leases[1], record=leases[1].record, retry_delay=timedelta(0)),
        Decision(lease=leases[4], record=attrs.evolve(leases[4].record, status=FAILED)),
    ]
    assert all(backend.decide_many(decisions))
    assert all(backend.decide_many(decisions))  # a repeat after a lost reply
    assert backend.complete(decisions[0].lease, decisions[0].record)  # answered, not applied

    harness.advance(LEASE * 2)  # the other three leases expire; the reaper fails them
    reaped = backend.claim_expired(limit=10, claim_ttl=LEASE)
    assert len(reaped) == 3
    failed = [Decision(lease=x, record=attrs.evolve(x.record, status=FAILED)) for x in reaped]
    assert all(backend.decide_many(failed))

    rates = backend.rates(timedelta(minutes=30))
    assert rates is not None
    assert {q: (r.entered, r.finished) for q, r in rates.items()} == {
        "default": (4, 3),  # the retried task is READY again: not finished
        "b": (2, 2),
    }


def test_quarantined_poison_counts_as_finished(harness: Harness) -> None:
    """A claim that finds undecodable bytes finalizes the task FAILED and counts it finished."""
    backend = redis_backend(harness)
    (record,) = backend.enqueue(tasks(1))
    backend.client.hset(backend.keys.store("payload"), record.id, b"\xff not json")
    assert backend.claim(["default"], worker="w", lease_ttl=LEASE) == []
    assert backend.rates(MINUTE) == {
        "default": QueueRates(queue="default", window=MINUTE, entered=1, finished=1)
    }


def test_queue_names_with_separators_are_counted_apart(harness: Harness) -> None:
    """Queue names holding the key's separator '|' (and any text) never share a counter."""
    backend = redis_backend(harness)
    names = ["a", "a|e", "a|e|f", "|", "{odd} queue ü"]
    for n, name in enumerate(names, start=1):
        backend.enqueue(tasks(n, queue=name))
    rates = backend.rates(MINUTE)
    assert rates is not None
    assert {q: r.entered for q, r in rates.items()} == {
        name: n for n, name in enumerate(names, start=1)
    }


def test_the_window_slides_on_the_server_clock(harness: Harness) -> None:
    """Counts leave the window once it has passed them, on the server's clock."""
    backend = redis_backend(harness)
    backend.enqueue(tasks(1))
    harness.advance(timedelta(seconds=30))
    backend.enqueue(tasks(2))
    harness.advance(timedelta(seconds=25))
    assert entered(backend) == 3
    harness.advance(timedelta(seconds=10))  # 65 s after the first, 35 s after the others
    assert entered(backend) == 2
    assert backend.rates(timedelta(seconds=30)) == {}
    harness.advance(timedelta(seconds=30))
    assert backend.rates(MINUTE) == {}
    assert entered(backend, timedelta(minutes=2)) == 3


def test_the_window_is_whole_buckets_ending_with_the_current_one(harness: Harness) -> None:
    """A window is rounded up to whole one-second buckets, the current one included."""
    backend = redis_backend(harness)
    for _ in range(5):  # a second may tick between enqueue and read: then try again
        before = backend.now()
        backend.enqueue(tasks(1))
        in_a_millisecond = entered(backend, timedelta(milliseconds=1))
        harness.advance(timedelta(seconds=1))  # now in the bucket before the current one
        rates = backend.rates(timedelta(milliseconds=1500))
        in_one_second = entered(backend, timedelta(seconds=1))
        if int(before.timestamp()) == int(backend.now().timestamp()):
            break
        harness.advance(timedelta(minutes=5))  # out of every window used here
    else:
        pytest.fail("the server's second kept ticking between enqueue and read")
    assert in_a_millisecond == 1  # the whole current bucket, however short the window
    assert rates == {
        "default": QueueRates(
            queue="default", window=timedelta(milliseconds=1500), entered=1, finished=0
        )
    }  # 1.5 s is two buckets; the window reported is the one asked for
    assert in_one_second == 0


def test_the_history_is_an_hour_and_older_buckets_are_deleted(harness: Harness) -> None:
    """A window beyond the history is answered over the hour; older buckets are deleted."""
    backend = redis_backend(harness)
    backend.enqueue(tasks(1, queue="old"))
    harness.advance(RATE_HISTORY - MINUTE)
    rates = backend.rates(timedelta(hours=5))
    assert rates == {"old": QueueRates(queue="old", window=RATE_HISTORY, entered=1, finished=0)}
    harness.advance(2 * MINUTE)
    assert backend.rates(timedelta(hours=5)) == {}
    assert telemetry(backend) == (1, 1)  # out of every window, deleted by the next new pair
    backend.enqueue(tasks(1, queue="new"))
    assert telemetry(backend) == (1, 1)
    assert backend.rates(timedelta(hours=5)) == {
        "new": QueueRates(queue="new", window=RATE_HISTORY, entered=1, finished=0)
    }


def test_deleting_old_buckets_is_bounded_per_call(harness: Harness) -> None:
    """A call that starts pairs deletes at most 100 old pairs more than it started."""
    backend = redis_backend(harness)
    backend.enqueue([record for n in range(600) for record in tasks(1, queue=f"q{n}")])
    rates = backend.rates(MINUTE)  # 1,200 counters, read in slices
    assert rates is not None
    assert len(rates) == 600
    assert telemetry(backend) == (600, 600)
    harness.advance(2 * RATE_HISTORY)

    backend.enqueue(tasks(1, queue="new-0"))  # one new pair: 101 old ones deleted
    assert telemetry(backend) == (600 - 101 + 1,) * 2
    # 199 new pairs (200 if the second ticked, making new-0's pair new too) delete 299 (300).
    backend.enqueue([record for n in range(200) for record in tasks(1, queue=f"new-{n}")])
    assert telemetry(backend) == (400, 400)
    backend.enqueue(tasks(1, queue="last-0"))
    backend.enqueue(tasks(1, queue="last-1"))
    oldest = backend.client.zrange(backend.keys.store("rate_index"), 0, 0, withscores=True)
    assert oldest[0][1] > backend.now().timestamp() - RATE_HISTORY.total_seconds()
    rates = backend.rates(timedelta(hours=5))
    assert rates is not None
    assert sorted(rates) == sorted([f"new-{n}" for n in range(200)] + ["last-0", "last-1"])


def test_a_namespace_reads_only_its_own_telemetry(
    harness_on: Callable[..., Harness], client: redis.Redis
) -> None:
    """Two namespaces on one server count apart, even with the same queue names."""
    one, two = redis_backend(harness_on(client)), redis_backend(harness_on(client))
    one.enqueue(tasks(2))
    two.enqueue(tasks(3))
    assert entered(one) == 2
    assert entered(two) == 3


# --- what counting costs ---------------------------------------------------------------


@pytest.fixture
def monitored(real_client: redis.Redis) -> Iterator[tuple[RedisBackend, Cost]]:
    """A backend on a fresh namespace, and `cost(fn)`: fn's Lua commands on the telemetry keys.

    MONITOR shows every command a script runs; the cost is a Counter of the
    command names whose key is one of the namespace's telemetry keys.
    """
    backend = RedisBackend(real_client, namespace=f"rates-cost-{uuid.uuid4().hex}")
    ours = {backend.keys.store("rates"), backend.keys.store("rate_index")}

    def cost(fn: Callable[[], object]) -> collections.Counter[str]:
        return script_commands(real_client, fn, on_key=ours.__contains__)

    try:
        yield backend, cost
    finally:
        delete_namespace(backend)


@pytest.mark.redis
def test_counting_costs_one_command_per_queue_and_kind_however_many_tasks(
    monitored: tuple[RedisBackend, Cost],
) -> None:
    """Counting a batch of 1 or 100 tasks over two queues costs the same few commands."""
    backend, cost = monitored

    def expect(spent: collections.Counter[str], increments: int) -> None:
        assert spent.pop("HINCRBY", 0) == increments
        # A counter's first increment in a second adds its pair to the index (one ZADD for
        # the call); a pair new to the index has old pairs looked for (none here).
        assert spent in ({}, {"ZADD": 1}, {"ZADD": 1, "ZRANGEBYSCORE": 1})

    for size in (1, 100):
        batch = tasks(size, queue="a") + tasks(size, queue="b")
        expect(cost(lambda batch=batch: backend.enqueue(batch)), 2)
        expect(cost(lambda batch=batch: backend.enqueue(batch)), 0)  # all repeats
    leases: list[Lease] = []

    def claim() -> None:
        leases.extend(backend.claim(["a", "b"], worker="w", lease_ttl=LEASE, limit=202))

    assert cost(claim) == {}  # claims, heartbeats, marks, promotions, reaping and reads never count
    assert cost(lambda: backend.extend_many(leases, LEASE)) == {}
    assert cost(lambda: backend.mark_started(leases)) == {}
    assert cost(lambda: backend.promote_due(limit=10)) == {}
    assert cost(lambda: backend.claim_expired(limit=10, claim_ttl=LEASE)) == {}
    assert cost(lambda: backend.wait_for_tasks(["a"], timedelta(milliseconds=10))) == {}
    assert cost(lambda: (backend.counts(), backend.peek("a", SUCCESSFUL))) == {}

    decisions = [
        Decision(lease=x, record=attrs.evolve(x.record, status=(SUCCESSFUL, FAILED)[n % 2]))
        if n % 3
        else Decision(lease=x, record=x.record, retry_delay=timedelta(0))
        for n, x in enumerate(leases)
    ]
    expect(cost(lambda: backend.decide_many(decisions)), 2)  # one "finished" per queue
    expect(cost(lambda: backend.decide_many(decisions)), 0)  # repeats
    failed = next(d.record.id for d in decisions if d.record.status is FAILED)
    expect(cost(lambda: backend.requeue(failed)), 1)
    expect(cost(lambda: backend.cancel(failed)), 1)
    assert cost(lambda: backend.rates(MINUTE)) == {"ZRANGEBYSCORE": 1, "HMGET": 1}

    advance(backend, 2 * RATE_HISTORY)  # every pair so far is old: the next new pair deletes them
    assert cost(lambda: backend.enqueue(tasks(100, queue="c"))) == {
        "HINCRBY": 1,
        "ZADD": 1,
        "ZRANGEBYSCORE": 1,
        "ZREMRANGEBYRANK": 1,
        "HDEL": 1,
    }
