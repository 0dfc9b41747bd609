"""``"database"``: on PostgreSQL, an enqueue inside ``transaction.atomic()`` on that Django
connection is written in its transaction, so the task commits or rolls back with the
application's writes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from django.core import checks
from django.db import connections, transaction
from django.tasks import task_backends
from django.tasks.exceptions import TaskResultDoesNotExist
from django.test import override_settings
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from tests.conftest import PostgresDatabase
from tests.django.bench import Signals
from tests.django.databases import add_connection, drop_connection
from tests.django.djapp import tasks
from tests.spans import recorded
from threadmill_core import Broker, TaskResultStatus, Worker, connect, tracing
from threadmill_postgres.testing import new_namespace

pytestmark = pytest.mark.postgres

#: The Django connection on the session's PostgreSQL database that these tests add.
ALIAS = "threadmill_pg"


#: Django 6.1 renamed transaction.savepoint (6.0's) to savepoint_create.
SAVEPOINT = getattr(transaction, "savepoint_create", None) or transaction.savepoint


class Rollback(Exception):
    """Raised to roll a block back."""


def tasks_setting(url: str, **options: Any) -> dict[str, Any]:
    return {
        "default": {
            "BACKEND": "threadmill_django.TaskBackend",
            "QUEUES": ["default", "high", "low"],
            "OPTIONS": {"url": url, "database": ALIAS, **options},
        }
    }


@pytest.fixture
def pg_connection(postgres_database: PostgresDatabase) -> Iterator[PostgresDatabase]:
    """A Django connection `ALIAS` on the session's PostgreSQL database, with a table of
    orders (the application's rows) emptied before each test."""
    add_connection(ALIAS, postgres_database.url)
    with connections[ALIAS].cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS orders (id text PRIMARY KEY)")
        cursor.execute("DELETE FROM orders")
    try:
        yield postgres_database
    finally:
        drop_connection(ALIAS)


@pytest.fixture
def url(pg_connection: PostgresDatabase) -> Iterator[str]:
    """The default alias on a fresh namespace of that database, written through `ALIAS`;
    the URL (the namespace is dropped afterwards)."""
    namespaced = f"{pg_connection.url}&namespace={new_namespace()}"
    if "?" not in pg_connection.url:
        namespaced = namespaced.replace("&", "?", 1)
    with override_settings(TASKS=tasks_setting(namespaced)):
        yield namespaced
    from threadmill_postgres import PostgresBackend
    from threadmill_postgres.testing import drop_namespace

    drop_namespace(PostgresBackend.from_url(namespaced))


@pytest.fixture
def broker(url: str) -> Iterator[Broker]:
    """A broker of its own on the alias's namespace: the worker's view."""
    own = connect(url)
    try:
        yield own
    finally:
        own.close()


def order(order_id: str) -> None:
    """An application write on `ALIAS`."""
    with connections[ALIAS].cursor() as cursor:
        cursor.execute("INSERT INTO orders VALUES (%s)", [order_id])


def orders() -> list[str]:
    with connections[ALIAS].cursor() as cursor:
        cursor.execute("SELECT id FROM orders ORDER BY id")
        return [row[0] for row in cursor.fetchall()]


def known(task_id: str) -> bool:
    """Whether the default alias's get_result knows the task."""
    try:
        tasks.add.get_result(task_id)
    except TaskResultDoesNotExist:
        return False
    return True


def test_a_task_enqueued_in_a_block_that_rolls_back_is_never_seen(broker: Broker) -> None:
    """Rolled back with the application's row: no worker runs it, get_result does not know it."""
    with contextlib.suppress(Rollback), transaction.atomic(using=ALIAS):
        order("a")
        result = tasks.add.enqueue(1, 2)
        assert result.status == "READY"
        raise Rollback
    assert orders() == []
    assert not known(result.id)
    assert Worker(broker, queues=["default"]).run(burst=True) == 0
    assert broker.counts() == {}


def test_a_task_enqueued_in_a_block_is_claimable_only_after_commit(
    broker: Broker, signals_seen: Signals
) -> None:
    """During the transaction a worker finds nothing, get_result raises and task_enqueued is
    not sent; after commit the task and the row are there together and a worker runs it."""
    with transaction.atomic(using=ALIAS):
        order("b")
        result = tasks.add.enqueue(3, 4)
        assert Worker(broker, queues=["default"]).run(burst=True) == 0
        assert not known(result.id)
        assert signals_seen.of("task_enqueued") == []
    assert orders() == ["b"]
    assert [event[1] for event in signals_seen.of("task_enqueued")] == [result.id]
    assert Worker(broker, queues=["default"]).run(burst=True) == 1
    finished = tasks.add.get_result(result.id)
    assert finished.status == "SUCCESSFUL"
    assert finished.return_value == 7


def test_a_nested_block_and_a_savepoint_roll_back_with_their_tasks_only(broker: Broker) -> None:
    """A nested atomic block rolled back and a savepoint rolled back drop their tasks; the
    outer block's tasks commit."""
    with transaction.atomic(using=ALIAS):
        outer = tasks.add.enqueue(1, 1)
        with contextlib.suppress(Rollback), transaction.atomic(using=ALIAS):
            nested = tasks.add.enqueue(2, 2)
            raise Rollback
        point = SAVEPOINT(using=ALIAS)
        saved = tasks.add.enqueue(3, 3)
        transaction.savepoint_rollback(point, using=ALIAS)
        after = tasks.add.enqueue(4, 4)
    assert Worker(broker, queues=["default"]).run(burst=True) == 2
    assert {r.id for r in broker.peek("default", TaskResultStatus.SUCCESSFUL)} == {
        outer.id,
        after.id,
    }
    assert not known(nested.id)
    assert not known(saved.id)


def test_outside_an_atomic_block_the_task_is_stored_at_once(broker: Broker) -> None:
    """No transaction open: enqueue stores through threadmill's own connections, as always."""
    result = tasks.add.enqueue(5, 6)
    assert broker.get_result(result.id).status is TaskResultStatus.READY


def test_a_block_on_another_connection_does_not_write_the_task_in_it(broker: Broker) -> None:
    """An atomic block on the default connection (not the option's): the task is stored at once
    and stays when that block rolls back."""
    with contextlib.suppress(Rollback), transaction.atomic(using="default"):
        result = tasks.add.enqueue(1, 2)
        raise Rollback
    assert known(result.id)


def test_a_refused_call_writes_nothing_and_leaves_the_transaction_usable(
    broker: Broker,
) -> None:
    """A call that does not fit the task raises inside the block before anything is written:
    the block goes on and commits its row."""
    with transaction.atomic(using=ALIAS):
        with pytest.raises(TypeError):
            tasks.add.enqueue(1)
        order("c")
    assert orders() == ["c"]
    assert broker.counts() == {}


def errors(url: str, **options: Any) -> list[str]:
    """The E004 messages of the default alias's system check with these options."""
    with override_settings(TASKS=tasks_setting(url, **options)):
        found = task_backends["default"].check()
    assert all(isinstance(message, checks.CheckMessage) for message in found)
    return [m.msg for m in found if m.id == "threadmill_django.E004"]


@pytest.mark.usefixtures("pg_connection")
def test_the_check_accepts_a_connection_on_the_urls_database(url: str) -> None:
    """The same host, port and database (localhost and 127.0.0.1 count as one): no error."""
    assert errors(url) == []
    assert errors(url.replace("127.0.0.1", "localhost")) == []


def test_the_check_refuses_a_connection_on_another_database(
    pg_connection: PostgresDatabase,
) -> None:
    """The URL names another database than the connection: E004 names both."""
    other = pg_connection.url.replace(pg_connection.name, "elsewhere")
    [message] = errors(other)
    assert f"names {ALIAS!r}, which is database {pg_connection.name!r}" in message
    assert "'elsewhere'" in message
    [port] = errors(pg_connection.url.replace(":5432", ":5433"))
    assert ":5433" in port


@pytest.mark.usefixtures("pg_connection")
def test_the_check_refuses_an_unknown_alias_sqlite_redis_and_on_commit_with_it(url: str) -> None:
    """An alias not in DATABASES, a SQLite connection, a Redis URL, and enqueue_on_commit set
    too are each refused, saying why."""
    with override_settings(TASKS=tasks_setting(url, database="nowhere")):
        [unknown] = [m.msg for m in task_backends["default"].check() if m.id.endswith("E004")]
    assert "'nowhere', which is not a connection in DATABASES" in unknown
    with override_settings(TASKS=tasks_setting(url, database="default")):
        [sqlite] = [m.msg for m in task_backends["default"].check() if m.id.endswith("E004")]
    assert "a sqlite connection" in sqlite
    [redis] = errors("redis://127.0.0.1:6379/0")
    assert "is redis://" in redis
    [both] = errors(url, enqueue_on_commit=True)
    assert "exclude each other" in both


def test_the_option_must_name_an_alias() -> None:
    """A database that is not a non-empty string is a settings error (E001)."""
    with override_settings(TASKS=tasks_setting("memory://", database=3)):
        found = task_backends["default"].check()
    assert [m.id for m in found if m.id == "threadmill_django.E001"] == ["threadmill_django.E001"]
    assert "['database'] must be the alias of a connection in DATABASES" in found[0].msg


def test_a_write_the_server_refuses_rolls_back_only_the_nested_block_around_it(
    url: str, broker: Broker
) -> None:
    """The tasks table refuses the row: enqueue raises PostgresBackendError from a nested
    atomic block, which rolls back; the outer block goes on and commits its row."""
    from threadmill_postgres import PostgresBackendError

    namespace = url.rsplit("namespace=", 1)[1]
    with connections[ALIAS].cursor() as cursor:
        cursor.execute(
            f'ALTER TABLE "{namespace}".tasks ADD CONSTRAINT no_low CHECK (queue <> %s)', ["low"]
        )
    with transaction.atomic(using=ALIAS):
        with (
            pytest.raises(PostgresBackendError, match="enqueue_on"),
            transaction.atomic(using=ALIAS),
        ):
            tasks.add.using(queue_name="low").enqueue(1, 2)
        order("d")
    assert orders() == ["d"]
    assert broker.counts() == {}


def test_a_task_written_in_a_transaction_with_tracing_on_keeps_the_callers_trace(
    broker: Broker,
) -> None:
    """With tracing on, a task written in the transaction is enqueued in a PRODUCER span of the
    caller's trace, whose context it keeps: its attempt runs in a child of that span."""
    exporter = recorded()
    exporter.clear()
    tracing.enable()
    try:
        request_span = trace.get_tracer("test").start_as_current_span("request")
        with request_span as request, transaction.atomic(using=ALIAS):
            order("t")
            result = tasks.add.enqueue(2, 3)
        assert set(broker.get_result(result.id).headers) == {"traceparent"}
        assert Worker(broker, queues=["default"]).run(burst=True) == 1
        finished = exporter.get_finished_spans()
    finally:
        tracing.disable()
        exporter.clear()
    [producer] = [s for s in finished if s.kind is SpanKind.PRODUCER]
    [consumer] = [s for s in finished if s.kind is SpanKind.CONSUMER]
    assert producer.context is not None
    assert producer.parent is not None
    assert producer.parent.span_id == request.get_span_context().span_id
    assert (producer.attributes or {})["messaging.message.id"] == result.id
    assert consumer.parent is not None
    assert consumer.parent.span_id == producer.context.span_id
