"""The schema: made on first use, one per namespace, versioned, upgraded in place, indexed."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import attrs
import psycopg
import pytest

from tests.conftest import PostgresDatabase
from tests.postgres.conftest import LEASE, admin, tasks
from threadmill_core import codec
from threadmill_core.live_workers import WorkerInfo
from threadmill_core.models import Decision, Progress, TaskResult, TaskResultStatus
from threadmill_postgres import PostgresBackend, SchemaVersionError, schema
from threadmill_postgres.schema import MIGRATIONS, Migration, quote_ident
from threadmill_postgres.testing import new_namespace

pytestmark = pytest.mark.postgres

READY, DEFERRED, RUNNING = (
    TaskResultStatus.READY,
    TaskResultStatus.DEFERRED,
    TaskResultStatus.RUNNING,
)


def meta(database: PostgresDatabase, namespace: str) -> dict[str, int]:
    rows = admin(database, f"SELECT name, value FROM {quote_ident(namespace)}.meta")
    return {str(row[0]): int(row[1]) for row in rows}


def test_the_first_backend_on_a_namespace_makes_its_schema_at_the_current_version(
    make_backend: Callable[..., PostgresBackend], database: PostgresDatabase
) -> None:
    """Connecting creates the schema, its tables and meta; a second backend finds it done."""
    namespace = new_namespace()
    make_backend(namespace=namespace)
    assert meta(database, namespace) == {"version": schema.VERSION, "oldest_compatible": 1}
    tables = admin(
        database,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1",
        (namespace,),
    )
    assert [name for (name,) in tables] == [
        "claims", "live_workers", "meta", "rates", "schedules", "tasks",
    ]  # fmt: skip
    second = make_backend(namespace=namespace)
    assert second.counts() == {}


def test_two_namespaces_keep_apart_even_with_the_same_ids_and_queues(
    make_backend: Callable[..., PostgresBackend],
) -> None:
    """The same ids in the same queues of two namespaces are two sets of tasks, each left alone."""
    a, b = make_backend(), make_backend()
    records = tasks(4)
    a.enqueue(records)
    b.enqueue(records)
    claimed = a.claim(["default"], worker="wa", lease_ttl=LEASE, limit=10)
    assert len(claimed) == 4
    assert b.counts()["default"].ready == 4, "b's tasks were not claimed"
    assert b.purge("default", READY) == 4
    assert a.counts()["default"].running == 4
    assert b.get(records[0].id) is None
    assert a.get(records[0].id) is not None


@pytest.mark.parametrize("namespace", ['jobs "quoted"', "with space", "Ünïcode 🚀", "a.b", "UPPER"])
def test_a_namespace_needing_quotes_is_a_schema_like_any(
    make_backend: Callable[..., PostgresBackend], namespace: str
) -> None:
    """Quotes, spaces, dots, capitals and non-ASCII text name a schema of their own."""
    backend = make_backend(namespace=f"{namespace} {new_namespace()[-6:]}")
    [record] = backend.enqueue(tasks(1))
    [lease] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    assert lease.task_id == record.id
    done = backend.complete(lease, attrs.evolve(lease.record, status=TaskResultStatus.SUCCESSFUL))
    assert done is not None
    assert done.status is TaskResultStatus.SUCCESSFUL


def test_a_schema_too_new_for_this_code_is_refused_before_anything_changes(
    make_backend: Callable[..., PostgresBackend], database: PostgresDatabase
) -> None:
    """A namespace another version made, and older code cannot use, raises SchemaVersionError."""
    namespace = new_namespace()
    first = make_backend(namespace=namespace)
    first.enqueue(tasks(2))
    later = schema.VERSION + 1
    admin(
        database,
        f"UPDATE {quote_ident(namespace)}.meta SET value = CASE name "
        "WHEN 'version' THEN %s ELSE %s END",
        (later, later),
    )
    with pytest.raises(SchemaVersionError) as refused:
        PostgresBackend.from_url(database.url, namespace=namespace)
    assert (refused.value.found, refused.value.oldest, refused.value.known) == (
        later,
        later,
        schema.VERSION,
    )
    assert "upgrade threadmill" in str(refused.value)
    assert meta(database, namespace) == {"version": later, "oldest_compatible": later}
    # A newer version that older code may still use is used as it is.
    admin(
        database,
        f"UPDATE {quote_ident(namespace)}.meta SET value = 1 WHERE name = 'oldest_compatible'",
    )
    beside = make_backend(namespace=namespace)
    assert beside.counts()["default"].ready == 2


#: A later version for the upgrade test: adds a column and an index, as a real step would.
STEP_NEXT = Migration(
    version=schema.VERSION + 1,
    oldest_compatible=1,
    sql="""
ALTER TABLE {schema}.tasks ADD COLUMN note text NOT NULL DEFAULT 'from the next version';
CREATE INDEX tasks_note ON {schema}.tasks (note);
""",
)


def test_an_older_schema_is_upgraded_in_place_keeping_its_tasks(
    make_backend: Callable[..., PostgresBackend], database: PostgresDatabase
) -> None:
    """ensure() applies the missing steps in order, once, and records the new version."""
    namespace = new_namespace()
    backend = make_backend(namespace=namespace)
    records = backend.enqueue(tasks(3))
    steps = (*MIGRATIONS, STEP_NEXT)
    with psycopg.connect(database.url, autocommit=True) as conn:
        assert schema.ensure(conn, namespace, steps) == STEP_NEXT.version
        assert schema.ensure(conn, namespace, steps) == STEP_NEXT.version, "a second time: same"
    assert meta(database, namespace) == {"version": STEP_NEXT.version, "oldest_compatible": 1}
    notes = admin(database, f"SELECT DISTINCT note FROM {quote_ident(namespace)}.tasks")
    assert notes == [("from the next version",)]
    # Code that knows only the version before goes on using it: the step raised no floor.
    assert [r.id for r in backend.peek("default", READY)] == [r.id for r in records]


def test_a_version_1_schema_gains_the_schedules_table_keeping_its_tasks(
    make_backend: Callable[..., PostgresBackend], database: PostgresDatabase
) -> None:
    """A namespace made by version 1 code is upgraded to the current version: its tasks kept,
    pauses stored."""
    namespace = new_namespace()
    with psycopg.connect(database.url, autocommit=True) as conn:
        assert schema.ensure(conn, namespace, MIGRATIONS[:1]) == 1
    backend = make_backend(namespace=namespace)
    assert meta(database, namespace) == {"version": schema.VERSION, "oldest_compatible": 1}
    records = backend.enqueue(tasks(2))
    paused = backend.set_schedule_paused("nightly", True)
    assert backend.schedule_pauses() == {"nightly": paused}
    assert [r.id for r in backend.peek("default", READY)] == [r.id for r in records]


def test_a_version_2_schema_gains_the_live_workers_table_and_version_2_code_goes_on(
    make_backend: Callable[..., PostgresBackend], database: PostgresDatabase
) -> None:
    """A namespace made by version 2 code is upgraded (to 3, then on), where workers are listed;
    no step raises the floor, so code that knows only version 2 still accepts the schema."""
    namespace = new_namespace()
    with psycopg.connect(database.url, autocommit=True) as conn:
        assert schema.ensure(conn, namespace, MIGRATIONS[:2]) == 2
    backend = make_backend(namespace=namespace)
    assert meta(database, namespace) == {"version": schema.VERSION, "oldest_compatible": 1}
    entry = WorkerInfo(
        id="box:1:abc", host="box", pid=1, queues=("default",), threads=1, version="0",
        started_at=backend.now(),
    )  # fmt: skip
    backend.register_worker(entry, timedelta(minutes=1))
    assert [w.id for w in backend.workers()] == ["box:1:abc"]
    with psycopg.connect(database.url, autocommit=True) as conn:
        assert schema.ensure(conn, namespace, MIGRATIONS[:2]) == schema.VERSION  # no error


def test_a_version_3_schema_gains_progress_and_cancel_requests_keeping_its_tasks(
    make_backend: Callable[..., PostgresBackend], database: PostgresDatabase
) -> None:
    """A namespace made by version 3 code, holding tasks, is upgraded to 4 in place: its
    tasks read with no progress and no cancel request, a running one takes both, and
    code that knows only version 3 still accepts the schema (the step raises no floor)."""
    namespace = new_namespace()
    with psycopg.connect(database.url, autocommit=True) as conn:
        assert schema.ensure(conn, namespace, MIGRATIONS[:3]) == 3
        quoted = quote_ident(namespace)
        conn.execute(
            f"INSERT INTO {quoted}.tasks (id, queue, priority, status, payload, ready_order,"
            f" enqueued_at) VALUES (%s, 'default', 0, 'READY', %s,"
            f" nextval('{quoted}.ready_order'), {quoted}.now_ms())",
            ("old", codec.encode_enqueued(TaskResult(id="old", task_path="m:f"))),
        )
    backend = make_backend(namespace=namespace)
    assert meta(database, namespace) == {"version": 4, "oldest_compatible": 1}
    stored = backend.get("old")
    assert stored is not None
    assert stored.progress is None
    assert stored.cancel_requested_at is None
    [lease] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    assert backend.record_progress([(lease, Progress(done=1, total=2))]) == [True]
    requested = backend.request_cancel("old")
    assert requested is not None
    assert requested.cancel_requested_at is not None
    assert requested.progress is not None
    assert requested.progress.done == 1
    renewed = backend.extend(lease, LEASE)
    assert renewed is not None
    assert renewed.cancel_requested
    with psycopg.connect(database.url, autocommit=True) as conn:
        assert schema.ensure(conn, namespace, MIGRATIONS[:3]) == 4  # no SchemaVersionError


@pytest.mark.parametrize("made_at", [1, 2, 3])
def test_every_named_query_runs_on_a_namespace_made_by_an_older_version(
    made_at: int, make_backend: Callable[..., PostgresBackend], database: PostgresDatabase
) -> None:
    """A namespace made at version 1, 2 or 3 (upgraded in place as needed) serves every
    call: each named query runs against the tables its migrations made."""
    namespace = new_namespace()
    with psycopg.connect(database.url, autocommit=True) as conn:
        assert schema.ensure(conn, namespace, MIGRATIONS[:made_at]) == made_at
    backend = make_backend(namespace=namespace)
    assert meta(database, namespace) == {"version": schema.VERSION, "oldest_compatible": 1}
    records = backend.enqueue(tasks(4))
    backend.enqueue(tasks(1, run_after=backend.now() + timedelta(hours=1)))
    assert backend.get(records[0].id) is not None
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=3)
    assert len(leases) == 3
    assert backend.extend_many(leases[:1], LEASE)[0] is not None
    assert backend.mark_started(leases[:1]) == [True]
    finished = attrs.evolve(leases[0].record, status=TaskResultStatus.SUCCESSFUL)
    done = backend.decide_many([Decision(lease=leases[0], record=finished)])
    assert done[0] is not None
    assert backend.release(leases[1:2])[0] is not None
    assert backend.expire_leases("w") == 1
    assert backend.claim_expired(limit=5, claim_ttl=LEASE) == []
    assert backend.promote_due(limit=10) == 0
    assert backend.next_due() is not None
    assert backend.cancel(records[3].id) is not None
    assert backend.requeue(records[3].id) is not None
    assert len(backend.peek("default", READY)) == 3
    assert backend.counts()["default"].ready == 3
    assert backend.rates(timedelta(minutes=1)) is not None
    assert backend.purge("default", DEFERRED) == 1
    backend.set_schedule_paused("nightly", True)
    assert set(backend.schedule_pauses()) == {"nightly"}
    entry = WorkerInfo(
        id="box:1:abc", host="box", pid=1, queues=("default",), threads=1, version="0",
        started_at=backend.now(),
    )  # fmt: skip
    backend.register_worker(entry, timedelta(minutes=1))
    assert [w.id for w in backend.workers()] == ["box:1:abc"]
    assert backend.unregister_worker("box:1:abc")


def test_backends_starting_together_make_one_schema(
    database: PostgresDatabase, make_backend: Callable[..., PostgresBackend]
) -> None:
    """Eight backends built at once on a new namespace all start; the schema is made once."""
    namespace = new_namespace()
    built: list[PostgresBackend] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def build() -> None:
        barrier.wait()
        try:
            built.append(PostgresBackend.from_url(database.url, namespace=namespace))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    try:
        assert not errors
        assert len(built) == 8
        assert meta(database, namespace)["version"] == schema.VERSION
    finally:
        for backend in built:
            backend.close()
        make_backend(namespace=namespace)  # dropped with the fixture's


def plan(database: PostgresDatabase, statement: str, params: dict[str, Any]) -> str:
    """The plan PostgreSQL makes for `statement` with `params`, as JSON text."""
    with psycopg.connect(database.url, autocommit=True) as conn:
        (row,) = conn.execute(f"EXPLAIN (FORMAT JSON) {statement}", params).fetchall()
    return json.dumps(row[0])


def test_claims_and_decisions_never_scan_the_finished_history(
    make_backend: Callable[..., PostgresBackend], database: PostgresDatabase
) -> None:
    """Beside 20,000 finished tasks, no claim, decision or renewal reads the whole table."""
    backend = make_backend()
    s = quote_ident(backend.namespace)
    admin(
        database,
        f"INSERT INTO {s}.tasks (id, queue, priority, status, payload, enqueued_at, finished_at) "
        "SELECT 'done-' || g, 'default', 0, 'SUCCESSFUL', '\\x7b7d'::bytea, 0, {s}.now_ms() "
        "FROM generate_series(1, 20000) g".replace("{s}", s),
    )
    backend.enqueue(tasks(50))
    backend.enqueue(tasks(5, run_after=backend.now() + timedelta(hours=1)))
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=5)
    admin(database, f"ANALYZE {s}.tasks")
    claim = plan(
        database,
        backend.sql.claim,
        {
            "queues": ["default"],
            "worker": "w",
            "ttl": 1000,
            "limit": 64,
            "request": "r",
            "channel": backend.channel,
        },
    )
    assert "tasks_ready" in claim
    decide = plan(
        database,
        backend.sql.decide_many,
        {
            "ids": [lease.task_id for lease in leases],
            "tokens": [lease.token for lease in leases],
            "targets": ["SUCCESSFUL"] * 5,
            "delays": [0] * 5,
            "errors": [b"[]"] * 5,
            "results": [None] * 5,
            "ttl": 3_600_000,
            "prune": 100,
            "channel": backend.channel,
        },
    )
    extend = plan(
        database,
        backend.sql.extend_many,
        {"ids": [lease.task_id for lease in leases], "tokens": [x.token for x in leases], "ttl": 1},
    )
    for text in (claim, decide, extend):
        assert "tasks" not in seq_scans(text), text


def seq_scans(plan_text: str) -> list[str]:
    """The tables read whole (a Seq Scan) anywhere in a JSON plan."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("Node Type") == "Seq Scan":
                found.append(str(node.get("Relation Name")))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(plan_text))
    return found


def test_deciding_a_decision_of_another_task_is_refused_before_anything(
    make_backend: Callable[..., PostgresBackend],
) -> None:
    """A batch with one mismatched decision raises ValueError and decides none of it."""
    backend = make_backend()
    backend.enqueue(tasks(2))
    first, second = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=2)
    good = Decision(lease=first, record=first.record, retry_delay=timedelta(0))
    bad = Decision(lease=second, record=first.record, retry_delay=timedelta(0))
    with pytest.raises(ValueError, match="made with the lease of"):
        backend.decide_many([good, bad])
    assert backend.counts()["default"].running == 2
