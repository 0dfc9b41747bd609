"""What is stored: results expiring in bounded batches, telemetry, poison beside payloads, NUL."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import timedelta

import attrs
import pytest

from tests.conftest import PostgresDatabase
from tests.postgres.conftest import LEASE, admin, tasks
from threadmill_core.errors import BackendUnavailable, PayloadError, UnsupportedValue
from threadmill_core.ids import new_task_id
from threadmill_core.models import Decision, TaskResult, TaskResultStatus
from threadmill_core.testing import Harness
from threadmill_postgres import PostgresBackend
from threadmill_postgres.errors import PostgresBackendError
from threadmill_postgres.schema import quote_ident
from threadmill_postgres.testing import advance, install_clock, plant_raw, start_recorded

pytestmark = pytest.mark.postgres

READY, SUCCESSFUL, FAILED = (
    TaskResultStatus.READY,
    TaskResultStatus.SUCCESSFUL,
    TaskResultStatus.FAILED,
)


def rows_in(database: PostgresDatabase, backend: PostgresBackend, table: str) -> int:
    ((count,),) = admin(database, f"SELECT count(*) FROM {quote_ident(backend.namespace)}.{table}")
    return int(count)


def finish(backend: PostgresBackend, count: int, queue: str = "default") -> list[TaskResult]:
    backend.enqueue(tasks(count, queue=queue))
    leases = backend.claim([queue], worker="w", lease_ttl=LEASE, limit=count)
    done = backend.decide_many(
        [
            Decision(lease=lease, record=attrs.evolve(lease.record, status=SUCCESSFUL))
            for lease in leases
        ]
    )
    return [record for record in done if record is not None]


def test_results_vanish_at_result_ttl_and_are_deleted_a_bounded_batch_at_a_time(
    make_backend: Callable[..., PostgresBackend], database: PostgresDatabase
) -> None:
    """Expired results are unreadable at once; a decide or promote deletes prune_batch at most."""
    backend = make_backend(result_ttl=timedelta(minutes=10), prune_batch=3)
    install_clock(backend, exact=True)
    done = finish(backend, 8)
    assert backend.get(done[0].id) is not None
    advance(backend, timedelta(minutes=10))
    assert backend.get(done[0].id) is None, "gone for every reader at result_ttl"
    assert backend.counts() == {}
    assert rows_in(database, backend, "tasks") == 8, "not deleted yet"
    finish(backend, 1, queue="other")  # its decision deletes three of the expired
    assert rows_in(database, backend, "tasks") == 8 - 3 + 1
    backend.promote_due(limit=1)  # so does a mover's pass
    assert rows_in(database, backend, "tasks") == 8 - 6 + 1
    backend.promote_due(limit=1)
    assert rows_in(database, backend, "tasks") == 1
    # An id whose result expired is free again: enqueued anew, not answered from the past.
    [again] = backend.enqueue([attrs.evolve(done[0], status=READY, args=["anew"])])
    assert (again.status, again.args, again.attempts) == (READY, ["anew"], 0)


def test_enqueue_replaces_an_expired_result_not_yet_deleted(
    make_backend: Callable[..., PostgresBackend], database: PostgresDatabase
) -> None:
    """The row of an expired result still in the table is overwritten by a new task of its id."""
    backend = make_backend(result_ttl=timedelta(minutes=1))
    install_clock(backend, exact=True)
    [old] = finish(backend, 1)
    advance(backend, timedelta(minutes=2))
    [new] = backend.enqueue([TaskResult(id=old.id, task_path="app:other", args=[9])])
    assert (new.task_path, new.args, new.status) == ("app:other", [9], READY)
    stored = backend.get(old.id)
    assert stored is not None
    assert (stored.task_path, stored.attempts, stored.worker_ids, stored.errors) == (
        "app:other",
        0,
        (),
        (),
    )
    assert rows_in(database, backend, "tasks") == 1


def test_rates_count_entries_and_finishes_once_each_on_the_database_clock(
    harness: Harness, database: PostgresDatabase
) -> None:
    """Enqueue and requeue enter; finishing and cancelling finish; retries and purges do neither."""
    backend = harness.backend
    assert isinstance(backend, PostgresBackend)
    assert backend.rates(timedelta(minutes=1)) == {}
    finish(backend, 3)
    [failed] = backend.enqueue(tasks(1))
    [lease] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    backend.retry(lease, lease.record, timedelta(0))  # neither
    [lease] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    backend.complete(lease, attrs.evolve(lease.record, status=FAILED))
    backend.requeue(failed.id)
    [cancelled] = backend.enqueue(tasks(1, queue="side"))
    backend.cancel(cancelled.id)
    backend.purge("side", TaskResultStatus.CANCELLED)
    rates = backend.rates(timedelta(minutes=1))
    assert (rates["default"].entered, rates["default"].finished) == (3 + 1 + 1, 3 + 1)
    assert (rates["side"].entered, rates["side"].finished) == (1, 1)
    assert rates["default"].window == timedelta(minutes=1)
    # An hour later all of it is outside any window, and the rows are trimmed as counts go on.
    harness.advance(timedelta(hours=1, seconds=2))
    assert backend.rates(timedelta(hours=2)) == {}
    assert backend.rates(timedelta(hours=2)) is not None
    before = rows_in(database, backend, "rates")
    finish(backend, 1)
    assert rows_in(database, backend, "rates") < before


def test_rates_refuse_a_window_that_is_not_a_positive_timedelta(harness: Harness) -> None:
    """A zero, negative or non-timedelta window is a ValueError."""
    for window in (timedelta(0), timedelta(seconds=-1), 60):
        with pytest.raises(ValueError, match="window"):
            harness.backend.rates(window)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("column", "value"),
    [("errors", b"\xff not json"), ("return_value", b"{broken")],
)
def test_undecodable_errors_or_result_make_a_task_poison_too(
    harness: Harness, column: str, value: bytes
) -> None:
    """Bytes beside a good payload that do not decode: reads raise PayloadError naming the task."""
    backend = harness.backend
    assert isinstance(backend, PostgresBackend)
    [record] = finish(backend, 1)
    plant_raw(
        backend, record.id, **({"errors": value} if column == "errors" else {"result": value})
    )
    with pytest.raises(PayloadError, match=record.id):
        backend.get(record.id)
    with pytest.raises(PayloadError, match=record.id):
        backend.peek("default", SUCCESSFUL)
    assert backend.counts()["default"].successful == 1
    assert backend.purge("default", SUCCESSFUL) == 1


def test_a_claim_quarantines_a_task_whose_errors_do_not_decode(harness: Harness) -> None:
    """A READY task with undecodable errors is FAILED as quarantined; the claim takes another."""
    backend = harness.backend
    assert isinstance(backend, PostgresBackend)
    poisoned, good = backend.enqueue(tasks(2))
    plant_raw(backend, poisoned.id, errors=b"\x00 not errors")
    [lease] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    assert lease.task_id == good.id
    stored = backend.get(poisoned.id)
    assert stored is not None
    assert stored.status is FAILED
    assert stored.errors[-1].exception_class_path.endswith("TaskQuarantined")


@pytest.mark.parametrize("field", ["id", "queue"])
def test_a_record_text_holding_nul_is_refused_and_nothing_is_stored(
    harness: Harness, field: str
) -> None:
    """PostgreSQL text cannot hold NUL: such an id or queue is refused, the whole batch with it."""
    backend = harness.backend
    good = TaskResult(id=new_task_id(), task_path="app:work")
    bad = attrs.evolve(good, **{"id": new_task_id(), field: "a\x00b"})
    with pytest.raises(UnsupportedValue, match=field):
        backend.enqueue([good, bad])
    assert backend.counts() == {}
    assert backend.get("a\x00b") is None
    assert backend.claim(["a\x00b"], worker="w", lease_ttl=LEASE) == []
    with pytest.raises(UnsupportedValue, match="worker"):
        backend.claim(["default"], worker="w\x00", lease_ttl=LEASE)


@pytest.mark.parametrize("field", ["id", "queue"])
def test_a_text_past_an_index_limit_is_refused_not_an_outage(harness: Harness, field: str) -> None:
    """An id or queue longer than a btree index row holds (2,704 bytes) is PostgreSQL's
    refusal, raised at once and naming the limit, not an outage that "may have been
    applied"; the batch stores nothing."""
    backend = harness.backend
    good = TaskResult(id=new_task_id(), task_path="app:work")
    long_text = secrets.token_hex(2000)  # 4,000 characters that do not compress
    bad = attrs.evolve(good, **{"id": new_task_id(), field: long_text})
    with pytest.raises(PostgresBackendError, match="exceeds") as raised:
        backend.enqueue([good, bad])
    assert not isinstance(raised.value, BackendUnavailable)
    assert "54000" in str(raised.value)
    assert backend.counts() == {}


def test_start_recorded_reads_the_current_claims_mark(harness: Harness) -> None:
    """The test helper sees a mark of the current claim only, not of an earlier one."""
    backend = harness.backend
    assert isinstance(backend, PostgresBackend)
    [record] = backend.enqueue(tasks(1))
    [lease] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    assert not start_recorded(backend, record.id)
    assert backend.mark_started([lease]) == [True]
    assert start_recorded(backend, record.id)
    backend.retry(lease, lease.record, timedelta(0))
    assert not start_recorded(backend, record.id), "a decided task has no current claim"
    backend.claim(["default"], worker="w", lease_ttl=LEASE)
    assert not start_recorded(backend, record.id), "a new claim starts unrecorded"
