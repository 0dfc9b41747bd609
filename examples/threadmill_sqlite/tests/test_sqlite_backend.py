"""What the SQLite backend promises beyond the conformance kit, in one process."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs
import pytest
from threadmill_core.clock import FakeClock
from threadmill_core.errors import PayloadError, TaskQuarantined, UnsupportedValue
from threadmill_core.models import (
    Decision,
    Lease,
    Progress,
    TaskError,
    TaskResult,
    TaskResultStatus,
)

from threadmill_sqlite import DatabaseLocked, SQLiteBackend, SQLiteBackendError
from threadmill_sqlite.backend import NOW_MS_SQL
from threadmill_sqlite.testing import FakeClockBackend, ShiftedClockBackend, plant_raw, status_of

READY = TaskResultStatus.READY
DEFERRED = TaskResultStatus.DEFERRED
RUNNING = TaskResultStatus.RUNNING
SUCCESSFUL = TaskResultStatus.SUCCESSFUL
FAILED = TaskResultStatus.FAILED
HOUR = timedelta(hours=1)
QUARANTINED = f"{TaskQuarantined.__module__}.{TaskQuarantined.__qualname__}"
#: Generous bound for a thread that must wake up; only reached when the test fails.
LIVENESS = 30.0


def new(task_id: str, **fields: object) -> TaskResult:
    return TaskResult(id=task_id, task_path="app.tasks:work", **fields)  # type: ignore[arg-type]


def finish(backend: SQLiteBackend, lease: Lease, value: object = None) -> TaskResult | None:
    return backend.complete(
        lease, attrs.evolve(lease.record, status=SUCCESSFUL, return_value=value)
    )


@pytest.fixture
def fake(db_path: Path) -> Iterator[FakeClockBackend]:
    """A backend on a fake clock, for exact time boundaries."""
    built = FakeClockBackend(db_path, clock=FakeClock(), result_ttl=timedelta(days=1))
    try:
        yield built
    finally:
        built.close()


# --- the clock -----------------------------------------------------------------------


def test_clock_sql_reads_whole_milliseconds_exactly(plain_backend: SQLiteBackend) -> None:
    """The clock expression turns SQLite's reading into epoch milliseconds exactly."""
    conn = sqlite3.connect(plain_backend.path)
    try:
        expression = NOW_MS_SQL.removeprefix("SELECT ")
        ms, seconds, fraction = conn.execute(
            f"SELECT {expression}, strftime('%s', 'now'), strftime('%f', 'now')"
        ).fetchone()
    finally:
        conn.close()
    assert ms == int(seconds) * 1000 + round(float(fraction) * 1000) % 1000


def test_now_is_the_system_clock_at_millisecond_resolution(plain_backend: SQLiteBackend) -> None:
    """`now()` is SQLite's reading of this machine's clock, in whole milliseconds, UTC."""
    now = plain_backend.now()
    assert now.tzinfo is not None
    assert now.microsecond % 1000 == 0
    assert abs(now - datetime.now(UTC)) < timedelta(minutes=5)


def test_shifted_clock_moves_by_the_advance(backend: ShiftedClockBackend) -> None:
    """The test-support clock reads at least `delta` later after `advance(delta)`."""
    before = backend.now()
    backend.advance(timedelta(days=2))
    assert backend.now() - before >= timedelta(days=2)


def test_a_lease_expires_at_its_deadline(fake: FakeClockBackend) -> None:
    """A lease whose deadline is exactly now has expired (at or before now)."""
    fake.enqueue([new("a")])
    (lease,) = fake.claim(["default"], worker="w", lease_ttl=HOUR)
    assert fake.mark_started([lease]) == [True]  # started: its expiry goes to the reaper
    fake.clock.advance(HOUR - timedelta(milliseconds=1))
    assert fake.claim_expired(limit=5, claim_ttl=HOUR) == []
    fake.clock.advance(timedelta(milliseconds=1))
    (reaped,) = fake.claim_expired(limit=5, claim_ttl=HOUR)
    assert reaped.task_id == "a"
    assert reaped.token != lease.token


def test_a_deferred_task_is_due_at_its_run_after(fake: FakeClockBackend) -> None:
    """A DEFERRED task is promoted when its `run_after` is exactly now."""
    fake.enqueue([new("a", run_after=fake.now() + HOUR)])
    fake.clock.advance(HOUR - timedelta(milliseconds=1))
    assert fake.promote_due(limit=5) == 0
    fake.clock.advance(timedelta(milliseconds=1))
    assert fake.promote_due(limit=5) == 1
    assert fake.peek("default", READY)[0].id == "a"


def test_results_expire_after_result_ttl_and_the_id_is_free_again(
    fake: FakeClockBackend,
) -> None:
    """A result is unreadable once `result_ttl` has passed; then its id can be enqueued anew."""
    fake.enqueue([new("a", args=[1])])
    (lease,) = fake.claim(["default"], worker="w", lease_ttl=HOUR)
    finish(fake, lease, "done")
    fake.clock.advance(timedelta(days=1) - timedelta(milliseconds=1))
    assert fake.get("a") is not None
    fake.clock.advance(timedelta(milliseconds=1))
    assert fake.get("a") is None
    assert fake.counts() == {}
    assert fake.peek("default", SUCCESSFUL) == []
    (again,) = fake.enqueue([new("a", args=[2])])
    assert (again.status, again.args, again.attempts) == (READY, [2], 0)


# --- durability and sharing ----------------------------------------------------------


def test_tasks_survive_closing_and_reopening_the_file(db_path: Path) -> None:
    """What one backend object stored, another one opened later on the same file reads back."""
    values = [2**64 + 1, -0.0, 0.1, float("inf"), "日本語 🚀", "\x00", [], {}, {"b": 1, "a": 2}]
    with SQLiteBackend(db_path) as first:
        first.enqueue([new("a", args=values, kwargs={"k": values}, priority=7)])
        (lease,) = first.claim(["default"], worker="w1", lease_ttl=HOUR)
    with SQLiteBackend(db_path) as second:
        record = second.get("a")
        assert record is not None
        assert (record.status, record.priority, record.worker_ids) == (RUNNING, 7, ("w1",))
        assert repr(record.args) == repr(values)
        assert list(record.kwargs["k"][-1]) == ["b", "a"]
        assert finish(second, lease, {"ok": True}) is not None
        stored = second.get("a")
        assert stored is not None
        assert stored.return_value == {"ok": True}


def test_one_file_many_backend_objects_share_one_queue(db_path: Path) -> None:
    """Two backend objects on one file see one queue, as two processes would."""
    with SQLiteBackend(db_path) as producer, SQLiteBackend(db_path) as consumer:
        producer.enqueue([new("a"), new("b", priority=5)])
        leases = consumer.claim(["default"], worker="w", lease_ttl=HOUR, limit=5)
        assert [lease.task_id for lease in leases] == ["b", "a"]
        assert producer.counts()["default"].running == 2


def test_threads_never_claim_one_task_twice(plain_backend: SQLiteBackend) -> None:
    """Threads claiming concurrently through one backend object take every task exactly once."""
    ids = [f"t{i:03}" for i in range(120)]
    plain_backend.enqueue([new(task_id) for task_id in ids])
    claimed: list[list[str]] = [[] for _ in range(6)]
    start = threading.Barrier(len(claimed))

    def work(mine: list[str]) -> None:
        start.wait()
        while leases := plain_backend.claim(["default"], worker="w", lease_ttl=HOUR, limit=3):
            mine.extend(lease.task_id for lease in leases)
            for lease in leases:
                finish(plain_backend, lease)

    threads = [threading.Thread(target=work, args=(mine,)) for mine in claimed]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [task_id for mine in claimed for task_id in mine]
    assert sorted(every) == ids
    assert plain_backend.counts()["default"].successful == len(ids)


def test_a_held_write_lock_times_out_as_database_locked(db_path: Path) -> None:
    """An operation that cannot get the write lock in `busy_timeout` raises, changing nothing."""
    backend = SQLiteBackend(db_path, busy_timeout=timedelta(milliseconds=50))
    holder = sqlite3.connect(db_path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(DatabaseLocked, match="locked"):
            backend.enqueue([new("a")])
        holder.execute("ROLLBACK")
        assert backend.get("a") is None
        backend.enqueue([new("a")])
        assert backend.get("a") is not None
    finally:
        holder.close()
        backend.close()


def test_a_closed_backend_refuses_work(db_path: Path) -> None:
    """After `close`, operations raise `SQLiteBackendError`; the file keeps the tasks."""
    backend = SQLiteBackend(db_path)
    backend.enqueue([new("a")])
    backend.close()
    with pytest.raises(SQLiteBackendError, match="closed"):
        backend.get("a")
    with SQLiteBackend(db_path) as again:
        assert again.get("a") is not None


def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    """Opening a file that is not SQLite raises `SQLiteBackendError` and leaves the file alone."""
    path = tmp_path / "notes.txt"
    path.write_bytes(b"not a database, just notes " * 100)
    with pytest.raises(SQLiteBackendError):
        SQLiteBackend(path)
    assert path.read_bytes() == b"not a database, just notes " * 100


def test_a_newer_schema_is_refused(db_path: Path) -> None:
    """A file written by another schema version is refused, not misread."""
    SQLiteBackend(db_path).close()
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("UPDATE threadmill_meta SET value = 4 WHERE name = 'schema_version'")
    conn.close()
    with pytest.raises(SQLiteBackendError, match="schema version 4"):
        SQLiteBackend(db_path)


def test_a_file_of_schema_version_1_is_migrated_and_its_running_tasks_read_unstarted(
    db_path: Path,
) -> None:
    """A version 1 file (before recorded starts) opens as version 3, its data kept, and a task
    it left RUNNING goes back uncharged when its lease expires (the side of running again)."""
    with ShiftedClockBackend(db_path) as backend:
        backend.enqueue([new("running"), new("done")])
        running, done = backend.claim(["default"], worker="w", lease_ttl=HOUR, limit=2)
        assert backend.mark_started([running]) == [True]
        assert finish(backend, done) is not None
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("ALTER TABLE threadmill_tasks DROP COLUMN claim")
    conn.execute("ALTER TABLE threadmill_tasks DROP COLUMN unstarted_expiries")
    conn.execute("ALTER TABLE threadmill_tasks DROP COLUMN progress")
    conn.execute("ALTER TABLE threadmill_tasks DROP COLUMN cancel_requested_at")
    conn.execute("UPDATE threadmill_meta SET value = 1 WHERE name = 'schema_version'")
    conn.close()
    with ShiftedClockBackend(db_path) as backend:
        kept = backend.get("done")
        assert kept is not None
        assert kept.status is SUCCESSFUL
        backend.advance(2 * HOUR)
        assert backend.claim_expired(limit=5, claim_ttl=HOUR) == []
        again = backend.get("running")
        assert again is not None
        assert (again.status, again.attempts, again.errors) == (READY, 0, ())
    conn = sqlite3.connect(db_path, isolation_level=None)
    (version,) = conn.execute(
        "SELECT value FROM threadmill_meta WHERE name = 'schema_version'"
    ).fetchone()
    conn.close()
    assert version == 3


def test_a_file_of_schema_version_2_is_migrated_without_progress_or_cancel_requests(
    db_path: Path,
) -> None:
    """A version 2 file (before progress and cancel requests) opens as version 3, its data
    kept, its RUNNING task with neither; both work on it afterwards."""
    with ShiftedClockBackend(db_path) as backend:
        backend.enqueue([new("running"), new("done")])
        running, done = backend.claim(["default"], worker="w", lease_ttl=HOUR, limit=2)
        assert finish(backend, done) is not None
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("ALTER TABLE threadmill_tasks DROP COLUMN progress")
    conn.execute("ALTER TABLE threadmill_tasks DROP COLUMN cancel_requested_at")
    conn.execute("UPDATE threadmill_meta SET value = 2 WHERE name = 'schema_version'")
    conn.close()
    with ShiftedClockBackend(db_path) as backend:
        kept = backend.get("done")
        assert kept is not None
        assert kept.status is SUCCESSFUL
        before = backend.get("running")
        assert before is not None
        assert (before.progress, before.cancel_requested_at) == (None, None)
        assert backend.record_progress([(running, Progress(done=1, total=2))]) == [True]
        asked = backend.request_cancel("running")
        assert asked is not None
        assert asked.cancel_requested_at is not None
        assert asked.progress is not None
        assert asked.progress.done == 1
        renewed = backend.extend(running, HOUR)
        assert renewed is not None
        assert renewed.cancel_requested
    conn = sqlite3.connect(db_path, isolation_level=None)
    (version,) = conn.execute(
        "SELECT value FROM threadmill_meta WHERE name = 'schema_version'"
    ).fetchone()
    conn.close()
    assert version == 3


def test_the_file_is_in_wal_mode(plain_backend: SQLiteBackend) -> None:
    """The database uses write-ahead logging, so readers never block the writer."""
    conn = sqlite3.connect(plain_backend.path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


# --- tokens and batches --------------------------------------------------------------


def test_tokens_are_fresh_random_128_bit_values(backend: ShiftedClockBackend) -> None:
    """Every claim and reaper claim gets a new 128-bit token, never one seen before."""
    backend.enqueue([new(f"t{i}") for i in range(20)])
    leases = backend.claim(["default"], worker="w", lease_ttl=HOUR, limit=20)
    assert backend.mark_started(leases) == [True] * 20
    tokens = [lease.token for lease in leases]
    backend.advance(2 * HOUR)
    tokens += [lease.token for lease in backend.claim_expired(limit=20, claim_ttl=HOUR)]
    assert len(set(tokens)) == 40
    assert all(len(token) == 32 and int(token, 16) >= 0 for token in tokens)


def test_a_batch_with_one_bad_value_stores_nothing(plain_backend: SQLiteBackend) -> None:
    """`enqueue` checks every record before storing any: one bad value, nothing stored."""
    with pytest.raises(UnsupportedValue, match=r"args\[0\]"):
        plain_backend.enqueue([new("a"), new("b", args=[(1, 2)])])
    assert plain_backend.counts() == {}


def test_a_bad_decision_in_a_batch_changes_nothing(plain_backend: SQLiteBackend) -> None:
    """`decide_many` with one undecodable return value applies none of the batch."""
    plain_backend.enqueue([new("a"), new("b")])
    first, second = plain_backend.claim(["default"], worker="w", lease_ttl=HOUR, limit=2)
    good = Decision(lease=first, record=attrs.evolve(first.record, status=SUCCESSFUL))
    bad = Decision(
        lease=second, record=attrs.evolve(second.record, status=SUCCESSFUL, return_value={1, 2})
    )
    with pytest.raises(UnsupportedValue, match="return_value"):
        plain_backend.decide_many([good, bad])
    assert plain_backend.counts()["default"].running == 2


# --- poison --------------------------------------------------------------------------


def test_poison_in_ready_is_quarantined_by_claim_and_does_not_use_the_limit(
    plain_backend: SQLiteBackend,
) -> None:
    """`claim` finalizes undecodable READY tasks FAILED and still returns `limit` good tasks."""
    plain_backend.enqueue([new("p1", priority=9), new("p2", priority=9), new("a"), new("b")])
    plant_raw(plain_backend, "p1", payload=b"\xff\xfe not json")
    plant_raw(plain_backend, "p2", payload=b'{"id": "someone-else"}')
    leases = plain_backend.claim(["default"], worker="w", lease_ttl=HOUR, limit=2)
    assert [lease.task_id for lease in leases] == ["a", "b"]
    for task_id in ("p1", "p2"):
        record = plain_backend.get(task_id)
        assert record is not None
        assert (record.status, record.task_path, record.priority) == (FAILED, "", 9)
        assert record.errors[-1].exception_class_path == QUARANTINED
        assert task_id in record.errors[-1].message


def test_poison_in_running_is_quarantined_by_the_reaper(backend: ShiftedClockBackend) -> None:
    """`claim_expired` finalizes an undecodable RUNNING task FAILED, keeping what still reads."""
    backend.enqueue([new("p"), new("z")])
    first, second = backend.claim(["default"], worker="w1", lease_ttl=HOUR, limit=2)
    assert backend.mark_started([first, second]) == [True, True]
    plant_raw(backend, first.task_id, payload=b"[]")
    backend.advance(2 * HOUR)
    reaped = backend.claim_expired(limit=1, claim_ttl=HOUR)
    assert [lease.task_id for lease in reaped] == ["z"]
    record = backend.get("p")
    assert record is not None
    assert (record.status, record.attempts, record.worker_ids) == (FAILED, 1, ("w1",))
    assert record.errors[-1].exception_class_path == QUARANTINED
    assert finish(backend, first) is None  # the poisoned lease is fenced off


def test_reads_of_poison_raise_payload_error_and_count_and_purge_still_work(
    plain_backend: SQLiteBackend,
) -> None:
    """`get`, `peek`, `cancel`, `enqueue` of poison raise `PayloadError`; `counts`, `purge` work."""
    plain_backend.enqueue([new("p")])
    plant_raw(plain_backend, "p", errors=b"{broken")
    for read in (
        lambda: plain_backend.get("p"),
        lambda: plain_backend.peek("default", READY),
        lambda: plain_backend.cancel("p"),
        lambda: plain_backend.enqueue([new("p")]),
    ):
        with pytest.raises(PayloadError, match="'p'"):
            read()
    assert status_of(plain_backend, "p") is READY
    assert plain_backend.counts()["default"].ready == 1
    assert plain_backend.purge("default", READY) == 1
    assert plain_backend.counts() == {}


def test_promote_due_moves_poison_without_decoding(fake: FakeClockBackend) -> None:
    """`promote_due` moves an undecodable DEFERRED task to READY as opaque bytes."""
    fake.enqueue([new("p", run_after=fake.now() + HOUR)])
    plant_raw(fake, "p", payload=b"\x00")
    fake.clock.advance(HOUR)
    assert fake.promote_due(limit=5) == 1
    assert status_of(fake, "p") is READY


# --- waiting -------------------------------------------------------------------------


def _waiter(backend: SQLiteBackend, queues: list[str]) -> threading.Thread:
    thread = threading.Thread(
        target=backend.wait_for_tasks, args=(queues, timedelta(hours=1)), daemon=True
    )
    thread.start()
    return thread


def test_wait_returns_at_once_when_work_is_there(plain_backend: SQLiteBackend) -> None:
    """`wait_for_tasks` does not wait when the queue already has a READY task."""
    plain_backend.enqueue([new("a")])
    waiter = _waiter(plain_backend, ["default"])
    waiter.join(LIVENESS)
    assert not waiter.is_alive()


def test_wait_wakes_for_work_from_this_backend(plain_backend: SQLiteBackend) -> None:
    """An enqueue through the same backend object wakes a waiter on that queue."""
    waiter = _waiter(plain_backend, ["default"])
    plain_backend.enqueue([new("other", queue="elsewhere")])
    plain_backend.enqueue([new("a")])
    waiter.join(LIVENESS)
    assert not waiter.is_alive()


def test_wait_wakes_for_work_from_another_connection(db_path: Path) -> None:
    """An enqueue through another backend object (as from another process) wakes a waiter."""
    with SQLiteBackend(db_path) as waiting, SQLiteBackend(db_path) as producer:
        waiter = _waiter(waiting, ["default"])
        producer.enqueue([new("a")])
        waiter.join(LIVENESS)
        assert not waiter.is_alive()


def test_a_wait_says_whether_it_found_work(plain_backend: SQLiteBackend) -> None:
    """`wait_for_tasks` answers False after a quiet timeout and True when a task is READY."""
    assert plain_backend.wait_for_tasks(["default"], timedelta(milliseconds=20)) is False
    plain_backend.enqueue([new("a")])
    assert plain_backend.wait_for_tasks(["default"], timedelta(hours=1)) is True


def test_close_wakes_waiters(db_path: Path) -> None:
    """`close` ends every `wait_for_tasks` at once."""
    backend = SQLiteBackend(db_path)
    waiter = _waiter(backend, ["default"])
    backend.close()
    waiter.join(LIVENESS)
    assert not waiter.is_alive()


def test_quarantine_keeps_errors_that_still_decode(plain_backend: SQLiteBackend) -> None:
    """A quarantined record keeps the earlier errors when only its payload is corrupt."""
    plain_backend.enqueue([new("p")])
    (lease,) = plain_backend.claim(["default"], worker="w1", lease_ttl=HOUR)
    earlier = TaskError(exception_class_path="app.Boom", message="boom")
    plain_backend.retry(lease, attrs.evolve(lease.record, errors=(earlier,)), timedelta(0))
    plant_raw(plain_backend, "p", payload=b"null")
    assert plain_backend.claim(["default"], worker="w2", lease_ttl=HOUR) == []
    record = plain_backend.get("p")
    assert record is not None
    assert [e.exception_class_path for e in record.errors] == ["app.Boom", QUARANTINED]
    assert record.finished_at is not None
