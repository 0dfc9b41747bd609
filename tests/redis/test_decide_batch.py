"""`decide_many` on Redis: a batch costs a fixed number of commands, and answers as one by one.

decide_many.lua writes the completions of a batch together, one command per
hash or index, and applies a retry, or a second decision on the same task,
on its own. These tests pin both halves: the cost does not grow with the
batch, and a batch mixing every case answers, and leaves the store, exactly
as the same decisions sent one at a time.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import attrs
import pytest
import redis

from tests.redis.conftest import script_commands, tasks
from threadmill_core.models import Decision, Lease, TaskError, TaskResult, TaskResultStatus
from threadmill_core.testing import Harness
from threadmill_redis import RedisBackend
from threadmill_redis.testing import delete_namespace

LEASE = timedelta(minutes=5)
SUCCESSFUL, FAILED = TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED
BOOM = TaskError(exception_class_path="builtins.ValueError", message="boom")

#: Fields a script sets from the server's clock: they differ between two namespaces.
CLOCKED = ("enqueued_at", "started_at", "last_attempted_at", "finished_at", "run_after")


def succeeded(lease: Lease, value: Any = None) -> Decision:
    record = attrs.evolve(lease.record, status=SUCCESSFUL, return_value=value)
    return Decision(lease=lease, record=record)


def failed(lease: Lease) -> Decision:
    errors = (*lease.record.errors, BOOM)
    return Decision(lease=lease, record=attrs.evolve(lease.record, status=FAILED, errors=errors))


def retried(lease: Lease, delay: timedelta = timedelta(0)) -> Decision:
    record = attrs.evolve(lease.record, errors=(*lease.record.errors, BOOM))
    return Decision(lease=lease, record=record, retry_delay=delay)


def stale(lease: Lease) -> Lease:
    """The lease with a token that was never granted."""
    return attrs.evolve(lease, token=f"{lease.token}0")


def mixed_batch(leases: list[Lease]) -> list[Decision]:
    """Every case decide_many.lua tells apart, in one batch over eight claimed tasks."""
    a, b, c, d, e, f, g, h = leases
    return [
        succeeded(a, {"n": 1}),
        failed(b),
        succeeded(c),  # None: stored as no result at all
        succeeded(a, {"n": 1}),  # the same decision again: REPEAT
        retried(d),  # applied on its own, after the completions before it are written
        succeeded(d),  # the task was just sent back: REFUSED
        Decision(lease=stale(e), record=succeeded(e).record),  # not the current token
        retried(f, timedelta(minutes=1)),
        succeeded(g, [1, 2]),
        failed(a),  # a third decision on a finished task: REPEAT, not FAILED
        succeeded(h, "last"),
    ]


def comparable(record: TaskResult | None) -> Any:
    """What two namespaces must agree on: everything but ids, clock fields and tokens."""
    if record is None:
        return None
    fields = attrs.asdict(record, recurse=False)
    for name in ("id", *CLOCKED):
        fields[name] = fields[name] is not None  # set or not, never the instant
    return fields


def answers(harness: Harness, *, one_by_one: bool) -> tuple[list[Any], list[Any]]:
    """The answers to `mixed_batch`, and then the records, segment counts and finished count."""
    backend = harness.backend
    stored = backend.enqueue(tasks(8))
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=8)
    assert [lease.task_id for lease in leases] == [record.id for record in stored]
    batch = mixed_batch(leases)
    if one_by_one:
        got = [backend.decide_many([decision])[0] for decision in batch]
    else:
        got = backend.decide_many(batch)
    after = [comparable(backend.get(record.id)) for record in stored]
    # Each task finished once, and sits in one segment, however often it was decided.
    rates = backend.rates(timedelta(minutes=10)) or {}
    after += [backend.counts(), {queue: r.finished for queue, r in rates.items()}]
    return [comparable(r) for r in got], after


def test_a_mixed_batch_answers_as_the_same_decisions_one_by_one(
    client: redis.Redis, harness_on: Callable[..., Harness]
) -> None:
    batched, batched_after = answers(harness_on(client), one_by_one=False)
    single, single_after = answers(harness_on(client), one_by_one=True)
    assert batched == single
    assert batched_after == single_after
    # And they are the answers the protocol asks for (the kit's model checks the rest).
    a, b, c, repeat, d_retry, d_refused, e_stale, f_retry, g, a_again, h = batched
    assert (a["status"], a["return_value"]) == (SUCCESSFUL, {"n": 1})
    assert (b["status"], b["errors"]) == (FAILED, (BOOM,))
    assert (c["status"], c["return_value"]) == (SUCCESSFUL, None)
    assert repeat == a_again == a
    assert d_retry["status"] is TaskResultStatus.READY
    assert d_refused is None
    assert e_stale is None
    assert f_retry["status"] is TaskResultStatus.DEFERRED
    assert g["return_value"] == [1, 2]
    assert h["return_value"] == "last"
    assert batched_after[-1] == {"default": 5}  # a, b, c, g and h


def test_an_applied_completion_answers_exactly_the_stored_record(
    client: redis.Redis, harness_on: Callable[..., Harness]
) -> None:
    """What `decide_many` answers for a completion applied now is the stored record, as is."""
    backend = harness_on(client).backend
    stored = backend.enqueue(tasks(3, priority=7))
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=3)
    got = backend.decide_many(
        [succeeded(leases[0], {"n": 1}), failed(leases[1]), succeeded(leases[2])]
    )
    assert got == [backend.get(record.id) for record in stored]
    assert all(record is not None and record.finished_at is not None for record in got)


# --- what a batch costs -------------------------------------------------------------------


@pytest.fixture
def backend(real_client: redis.Redis) -> Iterator[RedisBackend]:
    made = RedisBackend(real_client, namespace=f"decide-cost-{uuid.uuid4().hex}")
    try:
        yield made
    finally:
        delete_namespace(made)


@pytest.mark.redis
def test_completions_cost_the_same_commands_in_a_batch_of_two_or_a_hundred(
    real_client: redis.Redis, backend: RedisBackend
) -> None:
    # Telemetry is left out: a script adds a pair to its index only when a
    # second starts, which has nothing to do with the size of the batch (see
    # test_rates.py for its own cost).
    telemetry = {backend.keys.store("rates"), backend.keys.store("rate_index")}
    costs = []
    for size in (2, 100):
        backend.enqueue(tasks(size))
        leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=size)
        # Half succeed with a value, half fail with an error: every write of a completion.
        batch = [succeeded(x, n) if n % 2 else failed(x) for n, x in enumerate(leases, 1)]
        decide = functools.partial(backend.decide_many, batch)
        costs.append(script_commands(real_client, decide, on_key=lambda k: k not in telemetry))
    two, hundred = costs
    assert two == hundred
    # 12, and two HMGETs a batch for the progress and cancel requests it answers with.
    assert sum(two.values()) <= 14, two
