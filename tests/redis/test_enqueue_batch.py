"""``enqueue.lua``: one task or a batch, the same layout, repeats answered, counted, woken.

The script writes a batch with one command per hash or index, building
states and segment members itself; the first test checks them against the
shared functions every other script reads them with (``lib/parse_task``,
``lib/pack_task``, ``lib/segment_member``).
"""

from __future__ import annotations

import collections
import functools
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import attrs
import pytest
import redis

from tests.redis.conftest import script_commands, tasks
from threadmill_core import codec
from threadmill_core.clock import from_ms
from threadmill_core.errors import UnsupportedValue
from threadmill_core.models import (
    Decision,
    Lease,
    RetryPolicySpec,
    TaskError,
    TaskResult,
    TaskResultStatus,
)
from threadmill_core.testing import Harness
from threadmill_redis import RedisBackend, arguments, scripts
from threadmill_redis.replies import enqueued
from threadmill_redis.testing import delete_namespace

READY, DEFERRED = TaskResultStatus.READY, TaskResultStatus.DEFERRED
RUNNING = TaskResultStatus.RUNNING
LEASE = timedelta(minutes=5)

#: For each id: whether lib/pack_task packs lib/parse_task's reading of its state
#: back to the same bytes, whether lib/segment_member's member is in its segment's
#: view, and its score in the due index (false when absent).
LAYOUT_CHECK = """
--@include "lib/pack_task"
--@include "lib/parse_task"
--@include "lib/segment_member"
local out = {}
for _, id in ipairs(ARGV) do
  local raw = redis.call('HGET', KEYS[1], id)
  local t = parse_task(id, raw)
  local view = t.status == 'READY' and KEYS[2] or KEYS[3]
  out[#out + 1] = {
    pack_task(t) == raw and 1 or 0,
    redis.call('ZSCORE', view, segment_member(t)) and 1 or 0,
    redis.call('ZSCORE', KEYS[4], id),
  }
end
return out
"""


def backend_of(harness: Harness) -> RedisBackend:
    assert isinstance(harness.backend, RedisBackend)
    return harness.backend


def layout(backend: RedisBackend, ids: list[str]) -> list[Any]:
    source = scripts.resolve(
        "check", lambda name: LAYOUT_CHECK if name == "check" else scripts.read_packaged(name)
    )
    keys = [backend.keys.store(name) for name in ("state", "ready", "deferred", "due")]
    return backend.client.eval(source, len(keys), *keys, *ids)  # type: ignore[no-any-return]  # redis-py leaves eval untyped


def test_lone_tasks_and_batches_are_stored_as_the_shared_functions_read_them(
    harness: Harness,
) -> None:
    """States round-trip through parse_task and pack_task; members and due times are in place."""
    backend = backend_of(harness)
    now = backend.now()
    later, earlier = now + timedelta(hours=1), now - timedelta(hours=1)
    odd = {"queue": "a|b ü{x}", "priority": -100}
    sent = [
        *tasks(1),
        *tasks(1, run_after=later, priority=100),
        *tasks(1, run_after=earlier, **odd),
        *tasks(2, **odd),
        *tasks(2, run_after=later, **odd),
        *tasks(1, run_after=earlier),
        *tasks(1, priority=7),
    ]
    stored = backend.enqueue(sent[:1]) + backend.enqueue(sent[1:2]) + backend.enqueue(sent[2:3])
    stored += backend.enqueue(sent[3:])
    statuses = [READY, DEFERRED, READY, READY, READY, DEFERRED, DEFERRED, READY, READY]
    assert [r.status for r in stored] == statuses
    assert stored == [backend.get(record.id) for record in sent]
    checks = layout(backend, [record.id for record in sent])
    for record, (packed, member, due) in zip(stored, checks, strict=True):
        assert (packed, member) == (1, 1), record
        if record.status is DEFERRED:
            assert record.run_after is not None
            assert int(due) == int(record.run_after.timestamp() * 1000)
        else:
            assert due is None
    # FIFO within a priority, across a lone call and a batch.
    ready = backend.peek("a|b ü{x}", READY)
    assert [r.id for r in ready] == [sent[2].id, sent[3].id, sent[4].id]


def test_sequence_numbers_are_written_alike_across_tens_and_hundreds(harness: Harness) -> None:
    """enqueue.lua spells READY sequence numbers from their hundreds and two last digits.

    A batch entering READY at sequence 8 crosses one digit to two, and two
    hundreds, and a later one three digits to four: every state must still
    pack as lib/pack_task packs it and
    every member be the one lib/segment_member makes, or a later cancel or
    claim would miss it.
    """
    backend = backend_of(harness)
    sent = tasks(7) + tasks(250) + tasks(20)
    backend.enqueue(sent[:7])
    stored = backend.enqueue(sent[7:257])
    # The next batch enters at 995: it crosses from three digits to four.
    backend.client.hset(backend.keys.store("counters"), "seq", 994)
    stored += backend.enqueue(sent[257:])
    assert {r.status for r in stored} == {READY}
    checks = layout(backend, [record.id for record in sent])
    assert [tuple(check[:2]) for check in checks] == [(1, 1)] * len(sent)
    ready = backend.peek("default", READY, limit=300)
    assert [r.id for r in ready] == [r.id for r in sent]


def running_and_ready(harness: Harness) -> tuple[RedisBackend, TaskResult, TaskResult, Lease]:
    """Two stored tasks, the first claimed (RUNNING, its lease returned), the second READY."""
    backend = backend_of(harness)
    [first, second] = backend.enqueue(tasks(2))
    [lease] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    return backend, first, second, lease


def test_a_batch_answers_repeats_with_the_stored_record_and_keeps_the_first_payload(
    harness: Harness,
) -> None:
    """Stored ids (READY or RUNNING) and ids given twice answer with stored records, unchanged."""
    backend, first, second, lease = running_and_ready(harness)
    new = tasks(2)
    sent = [
        attrs.evolve(first, args=["changed"]),
        new[0],
        attrs.evolve(second, args=["changed"]),
        attrs.evolve(new[0], args=["changed"]),
        new[1],
    ]
    got = backend.enqueue(sent)
    assert [r.status for r in got] == [RUNNING, READY, READY, READY, READY]
    assert got[0] == lease.record
    assert got[2] == second
    assert got[3] == got[1]
    assert got[3].args == new[0].args
    assert [backend.get(r.id) for r in sent] == got
    assert backend.counts()["default"].pending == 4


def test_a_lone_repeat_answers_with_the_stored_record_and_keeps_the_first_payload(
    harness: Harness,
) -> None:
    """A lone record of a stored id (READY or RUNNING) is answered with the stored record."""
    backend, first, second, lease = running_and_ready(harness)
    assert backend.enqueue([attrs.evolve(first, args=["changed"])]) == [lease.record]
    assert backend.enqueue([attrs.evolve(second, args=["changed"], priority=9)]) == [second]
    assert [backend.get(first.id), backend.get(second.id)] == [lease.record, second]
    counts = backend.counts()["default"]
    assert (counts.ready, counts.running) == (1, 1)


def test_a_batch_longer_than_one_command_spreads_is_stored_in_order(
    harness_on: Callable[..., Harness], client: redis.Redis
) -> None:
    """1,200 records in one script call: more ids and items than one command takes at once."""
    backend = backend_of(harness_on(client, enqueue_batch=1500))
    sent = tasks(1200)
    repeat = backend.enqueue(sent[600:601])
    got = backend.enqueue(sent)
    assert [r.id for r in got] == [r.id for r in sent]
    assert got[600] == repeat[0]
    ready = backend.peek("default", READY, limit=2000)
    assert [r.id for r in ready] == [sent[600].id] + [r.id for r in sent if r is not sent[600]]
    assert backend.counts()["default"].ready == 1200


def test_wake_ups_are_one_per_task_entering_ready_and_one_for_deferred_tasks(
    harness: Harness,
) -> None:
    """Per queue: as many wake-ups as tasks entered READY, at least one if any was deferred."""
    backend = backend_of(harness)
    later = backend.now() + timedelta(hours=1)
    backend.enqueue(
        [
            *tasks(3, queue="a"),
            *tasks(2, queue="b", run_after=later),
            *tasks(1, queue="c", run_after=later),
            *tasks(1, queue="c"),
            *tasks(1, queue="c", priority=3),
        ]
    )
    backend.enqueue(tasks(1, queue="d", run_after=later))
    backend.enqueue(tasks(1, queue="e"))
    lengths = {q: backend.client.llen(backend.keys.notify(q)) for q in "abcde"}
    assert lengths == {"a": 3, "b": 1, "c": 2, "d": 1, "e": 1}


def test_only_new_tasks_count_as_entered(harness: Harness) -> None:
    """Telemetry and queue sizes count the new tasks of a batch, not its repeats."""
    backend = backend_of(harness)
    [stored] = backend.enqueue(tasks(1))
    backend.enqueue([stored, *tasks(2), stored])
    backend.enqueue([stored])
    rates = backend.rates(timedelta(minutes=1))
    assert rates is not None
    assert rates["default"].entered == 3
    assert backend.counts()["default"].ready == 3


def test_a_bad_record_anywhere_in_a_long_batch_stores_nothing(
    harness_on: Callable[..., Harness], client: redis.Redis
) -> None:
    """Every record is checked before the first script call of a pipelined batch is sent."""
    backend = backend_of(harness_on(client, enqueue_batch=10))
    sent = tasks(45)
    sent[41] = attrs.evolve(sent[41], kwargs={"when": {1, 2}})
    with pytest.raises(UnsupportedValue, match=r"kwargs\['when'\]"):
        backend.enqueue(sent)
    assert backend.counts() == {}
    assert backend.client.hlen(backend.keys.store("payload")) == 0


def test_a_bad_retry_policy_after_calls_already_written_stores_nothing(
    harness_on: Callable[..., Harness], client: redis.Redis
) -> None:
    """A long batch is sent as several script calls, but only after every record is checked.

    The records before the bad one fill two script calls, so had the last
    been found bad only when its own call was made, the first calls would
    have been stored already.
    """
    backend = backend_of(harness_on(client, enqueue_batch=2))
    sent = tasks(6)
    sent[5] = attrs.evolve(sent[5], retry=RetryPolicySpec(path="\ud800"))
    with pytest.raises(UnsupportedValue, match=r"retry\.path"):
        backend.enqueue(sent)
    assert backend.counts() == {}
    assert backend.client.hlen(backend.keys.store("payload")) == 0


def test_a_pipelined_batch_answers_in_order_across_calls(
    harness_on: Callable[..., Harness], client: redis.Redis
) -> None:
    """Records split over several script calls come back in the order sent, repeats included."""
    backend = backend_of(harness_on(client, enqueue_batch=4))
    sent = tasks(10, queue="q")
    sent[7] = sent[2]
    got = backend.enqueue(sent)
    assert [r.id for r in got] == [r.id for r in sent]
    assert got[7] == got[2]
    leases = backend.claim(["q"], worker="w", lease_ttl=LEASE, limit=20)
    assert [x.task_id for x in leases] == [r.id for i, r in enumerate(sent) if i != 7]
    done = TaskResultStatus.SUCCESSFUL
    decided = backend.decide_many(
        [Decision(lease=x, record=attrs.evolve(x.record, status=done)) for x in leases]
    )
    assert all(isinstance(r, TaskResult) for r in decided)


def test_the_answer_to_a_new_task_copies_every_field_the_caller_gives() -> None:
    """A bare OK row answers with each of the record's given fields, the scripts' at defaults."""
    record = TaskResult(
        id="given",
        task_path="app:work",
        args=[1],
        kwargs={"a": 2},
        queue="q",
        priority=9,
        retry=RetryPolicySpec(path="app:policy", options={"n": 1}),
        attempts=3,  # the scripts' own, like the errors and workers below: ignored
    )
    record = attrs.evolve(
        record, errors=(TaskError(exception_class_path="x.E", message="m"),), worker_ids=("w",)
    )
    call = (record.id, record.args, record.kwargs)
    [answer] = enqueued([0], [(record, [call])], 1_700_000_000_000)
    given = [f.name for f in attrs.fields(TaskResult) if f.name not in codec.STATE_FIELDS]
    assert {name: getattr(answer, name) for name in given} == {
        name: getattr(record, name) for name in given
    }
    now = from_ms(1_700_000_000_000)
    assert answer == TaskResult(
        **{name: getattr(record, name) for name in given}, status=READY, enqueued_at=now
    )


def test_every_answer_of_a_batch_is_the_record_stored(
    harness_on: Callable[..., Harness], client: redis.Redis
) -> None:
    """A batch's answers are the stored records, each its own call's, a repeat's included.

    Only the first new task's record is made by the class, the rest copy it
    (`models.evolved`); a repeat first makes the copies start from the next one.
    """
    backend = backend_of(harness_on(client))
    [first] = backend.enqueue([TaskResult(id="t0", task_path="app:other", queue="q")])
    later = backend.now() + timedelta(hours=1)
    template = TaskResult(
        id="ignored",
        task_path="app:work",
        queue="q",
        priority=-4,
        run_after=later,
        retry=RetryPolicySpec(path="app:policy", options={"n": 1}),
    )
    calls = [(f"t{n}", [n], {"n": n}) for n in range(4)]
    answers = backend.enqueue_calls(template, calls)
    assert answers[0] == first == backend.get("t0")
    for (task_id, args, kwargs), answer in zip(calls[1:], answers[1:], strict=True):
        assert answer == backend.get(task_id)
        assert (answer.id, answer.args, answer.kwargs) == (task_id, args, kwargs)
        assert (answer.status, answer.run_after) == (TaskResultStatus.DEFERRED, later)
        assert answer.enqueued_at == answers[1].enqueued_at is not None
    assert len({id(answer.kwargs) for answer in answers}) == 4  # each call's own


@pytest.mark.redis
def test_an_enqueue_costs_a_fixed_number_of_commands_whatever_its_size(
    real_client: redis.Redis,
) -> None:
    """What enqueue.lua promises, counted by MONITOR (rate index aside): 2 or 500 tasks alike.

    A lone task is written straight, with one HSETNX for the HMGET and HSET
    of its payload; its other writes are a batch's.
    """
    backend = RedisBackend(real_client, namespace=f"enqueue-cost-{uuid.uuid4().hex}")
    index = backend.keys.store("rate_index")

    def cost(records: list[TaskResult]) -> collections.Counter[str]:
        """The commands enqueue.lua runs for `records`, by name."""
        enqueue = functools.partial(backend.enqueue, records)
        return script_commands(real_client, enqueue, on_key=lambda key: key != index)

    try:
        real_client.lpush(backend.keys.notify("default"), *[1] * backend.options.notify_cap)
        backend.enqueue(tasks(1))  # the script loaded
        batch = {"TIME": 1, "HMGET": 1, "HSET": 2, "ZADD": 1, "HINCRBY": 3, "LLEN": 1}
        lone = dict(batch, HMGET=0, HSETNX=1, HSET=1)
        assert cost(tasks(2)) == cost(tasks(500)) == batch
        assert +collections.Counter(cost(tasks(1))) == +collections.Counter(lone)
        later = backend.now() + timedelta(hours=1)
        deferred = dict(batch, ZADD=2, HINCRBY=2)  # the due index, and no sequence numbers
        assert cost(tasks(2, run_after=later)) == cost(tasks(300, run_after=later)) == deferred
        lone_deferred = dict(deferred, HMGET=0, HSETNX=1, HSET=1)
        assert +collections.Counter(cost(tasks(1, run_after=later))) == +collections.Counter(
            lone_deferred
        )
    finally:
        delete_namespace(backend)


def test_groups_of_calls_are_cut_into_chunks_in_order() -> None:
    """A chunk holds at most `size` tasks; a group is split across chunks, never reordered."""
    a, b = TaskResult(id="", task_path="m:a"), TaskResult(id="", task_path="m:b")
    calls = [(str(n), [], {}) for n in range(7)]
    groups: list[arguments.Group] = [(a, calls[:5]), (b, calls[5:])]
    assert arguments.chunks(groups, 3) == [
        [(a, calls[0:3])],
        [(a, calls[3:5]), (b, calls[5:6])],
        [(b, calls[6:7])],
    ]
    assert arguments.chunks(groups, 7) == [groups]
    assert arguments.chunks([(a, [])], 3) == []
