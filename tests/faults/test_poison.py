"""Poison: bytes that are not a task record, written straight into each backend's storage.

Guarantee 6: the reaper and workers quarantine such a task as FAILED with a
payload error and go on with the rest of the batch; inspection raises
`PayloadError` naming the task; counts and purge still work; nothing cycles.
The memory backend is planted with its test-support `_plant_raw`, Redis by
writing the bytes into the payload hash of the key schema, PostgreSQL by
overwriting the payload column (`threadmill_postgres.testing.plant_raw`).
"""

from __future__ import annotations

from datetime import timedelta

import attrs
import pytest

from tests.faults import fault_tasks
from threadmill_core import Broker, PayloadError, TaskResult, TaskResultStatus, Worker, codec
from threadmill_core.ids import new_task_id
from threadmill_core.models import RetryPolicySpec
from threadmill_core.testing import Harness
from threadmill_core.worker.maintenance import reap
from threadmill_memory import MemoryBackend
from threadmill_postgres import PostgresBackend
from threadmill_postgres.testing import plant_raw
from threadmill_redis import RedisBackend

READY, RUNNING, FAILED = TaskResultStatus.READY, TaskResultStatus.RUNNING, TaskResultStatus.FAILED
LEASE = timedelta(seconds=30)
QUARANTINED = "threadmill_core.errors.TaskQuarantined"

#: Bytes that are not a record: garbage, a JSON value of the wrong shape, and a
#: well-formed record of some other task.
POISONS = {
    "garbage": b"\x00\xff not a record",
    "wrong-shape": b'{"id": 7}',
    "another-task": codec.encode_record(TaskResult(id=new_task_id(), task_path="x:y")),
}


def good(count: int, **fields: object) -> list[TaskResult]:
    """Records of `fault_tasks.echo`, retried on expiry (the policy of `fault_tasks.work`)."""
    fields.setdefault("retry", fault_tasks.work.retry_spec)
    return [
        TaskResult(id=new_task_id(), task_path=fault_tasks.echo.path, args=[n], **fields)  # type: ignore[arg-type]  # fields given as keywords, checked by the class
        for n in range(count)
    ]


def plant(harness: Harness, data: bytes, status: TaskResultStatus) -> str:
    """Store `data` as the bytes of a new task in `status` (RUNNING: its lease 30 s long)."""
    backend = harness.backend
    task_id = new_task_id()
    if isinstance(backend, MemoryBackend):
        at = backend.now() + LEASE if status is RUNNING else None
        backend._plant_raw(task_id, data, queue="poison", status=status, at=at)
        return task_id
    assert isinstance(backend, RedisBackend | PostgresBackend)
    [record] = backend.enqueue([TaskResult(id=task_id, task_path="x:y", queue="poison")])
    if status in (RUNNING, FAILED):
        [lease] = backend.claim(["poison"], worker="ghost", lease_ttl=LEASE)
        backend.mark_started([lease])  # it started: its expiry goes to the reaper
        if status is FAILED:
            backend.complete(lease, attrs.evolve(lease.record, status=FAILED))
    if isinstance(backend, PostgresBackend):
        plant_raw(backend, record.id, payload=data)
    else:
        backend.client.hset(backend.keys.store("payload"), record.id, data)
    return task_id


def assert_quarantined(harness: Harness, task_id: str) -> None:
    record = harness.backend.get(task_id)
    assert record is not None
    assert record.status is FAILED
    assert record.errors[-1].exception_class_path == QUARANTINED
    assert "payload could not be decoded" in record.errors[-1].message
    assert record.task_path == "", "the path was in the bytes that do not decode"


@pytest.mark.parametrize("poison", list(POISONS))
def test_the_reaper_quarantines_poison_and_decides_the_rest_of_its_batch(
    harness: Harness, poison: str
) -> None:
    """Poison among expired leases is FAILED as quarantined, the rest retried, and none cycles."""
    backend = harness.backend
    backend.enqueue(good(2))
    before = backend.claim(["default"], worker="ghost", lease_ttl=LEASE, limit=2)
    poisoned = plant(harness, POISONS[poison], RUNNING)
    backend.enqueue(good(2, queue="late"))
    after = backend.claim(["late"], worker="ghost", lease_ttl=LEASE, limit=2)
    assert backend.mark_started([*before, *after]) == [True] * 4  # they ran, then the ghost died
    harness.advance(LEASE + timedelta(seconds=1))

    assert reap(backend, limit=10, claim_ttl=LEASE) == 4
    assert_quarantined(harness, poisoned)
    for lease in [*before, *after]:
        retried = backend.get(lease.task_id)
        assert retried is not None
        assert retried.status in (READY, TaskResultStatus.DEFERRED)
        assert retried.errors[-1].exception_class_path.endswith("AcknowledgementTimeout")

    harness.advance(LEASE * 4)
    assert reap(backend, limit=10, claim_ttl=LEASE) == 0, "nothing left to reap: no cycling"
    assert backend.counts()["poison"].failed == 1


def test_a_worker_quarantines_poison_and_runs_the_rest(harness: Harness) -> None:
    """A burst worker finalizes poison FAILED and runs every good task around it, once."""
    backend = harness.backend
    backend.enqueue(good(2, queue="poison"))
    poisoned = plant(harness, POISONS["garbage"], READY)
    records = backend.enqueue(good(2, queue="poison"))
    broker = Broker(backend)
    processed = Worker(broker, queues=["poison"], threads=2, poll_interval=0.01).run(burst=True)
    assert processed == 4
    assert_quarantined(harness, poisoned)
    counts = backend.counts()["poison"]
    assert (counts.successful, counts.failed, counts.ready, counts.running) == (4, 1, 0, 0)
    assert all(backend.get(r.id).attempts == 1 for r in records)  # type: ignore[union-attr]  # every task is stored


@pytest.mark.parametrize("status", [READY, FAILED])
def test_inspecting_poison_raises_a_payload_error_naming_the_task(
    harness: Harness, status: TaskResultStatus
) -> None:
    """get, peek, cancel and requeue raise PayloadError naming the task; counts and purge work."""
    backend = harness.backend
    poisoned = plant(harness, POISONS["garbage"], status)
    with pytest.raises(PayloadError, match=poisoned):
        backend.get(poisoned)
    with pytest.raises(PayloadError, match=poisoned):
        backend.peek("poison", status)
    operator_action = backend.cancel if status is READY else backend.requeue
    with pytest.raises(PayloadError, match=poisoned):
        operator_action(poisoned)
    counts = backend.counts()["poison"]
    assert sum(counts.of(s) for s in TaskResultStatus) == 1
    purged = sum(backend.purge("poison", s) for s in (READY, FAILED, TaskResultStatus.CANCELLED))
    assert purged == 1
    assert "poison" not in backend.counts()


def test_an_unknown_retry_policy_is_final_for_the_reaper(harness: Harness) -> None:
    """A task whose stored policy this process does not know is FAILED on expiry, not retried."""
    backend = harness.backend
    backend.enqueue(good(1, retry=RetryPolicySpec(path="nowhere:policy")))
    [lease] = backend.claim(["default"], worker="ghost", lease_ttl=LEASE)
    assert backend.mark_started([lease]) == [True]
    harness.advance(LEASE + timedelta(seconds=1))
    assert reap(backend, claim_ttl=LEASE) == 1
    final = backend.get(lease.task_id)
    assert final is not None
    assert final.status is FAILED
    assert "nowhere:policy" in final.errors[-1].message
    harness.advance(LEASE * 4)
    assert reap(backend, claim_ttl=LEASE) == 0
