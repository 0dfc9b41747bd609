"""`PostgresBackend.enqueue_on`: tasks written in the caller's transaction commit or roll back
with it, and wake a listening worker only at its commit."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from tests.conftest import PostgresDatabase
from tests.postgres.conftest import LEASE, tasks
from threadmill_core.models import TaskResultStatus
from threadmill_postgres import PostgresBackend, PostgresBackendError
from threadmill_postgres.testing import drop_namespace

pytestmark = pytest.mark.postgres


class Rollback(Exception):
    """Raised to roll a block back."""


def claimed(backend: PostgresBackend) -> list[str]:
    leases = backend.claim(["default"], worker="w", lease_ttl=LEASE, limit=10)
    return [lease.record.id for lease in leases]


def test_tasks_written_in_a_transaction_are_claimable_only_after_its_commit(
    database: PostgresDatabase, make_backend: Callable[..., PostgresBackend]
) -> None:
    """During the transaction a claim finds nothing and a listening worker is not woken;
    at commit both see the tasks, stored as enqueue returned them."""
    backend = make_backend(enqueue_batch=2)  # five records: three statements
    records = tasks(5)
    with psycopg.connect(database.url) as conn:
        stored = backend.enqueue_on(conn, records)
        assert [r.id for r in stored] == [r.id for r in records]
        assert {r.status for r in stored} == {TaskResultStatus.READY}
        assert claimed(backend) == []
        assert backend.get(records[0].id) is None
        assert not backend.wait_for_tasks(["default"], timedelta(milliseconds=300))
        conn.commit()
    assert backend.wait_for_tasks(["default"], timedelta(seconds=5))
    assert sorted(claimed(backend)) == sorted(r.id for r in records)


def test_tasks_written_in_a_transaction_that_rolls_back_are_never_stored(
    database: PostgresDatabase, make_backend: Callable[..., PostgresBackend]
) -> None:
    """Rolled back: no claim, no get, no counts; the same ids enqueued later are new tasks."""
    backend = make_backend()
    records = tasks(3)
    with psycopg.connect(database.url) as conn:
        backend.enqueue_on(conn, records)
        conn.rollback()
    assert claimed(backend) == []
    assert backend.get(records[0].id) is None
    assert backend.counts() == {}
    assert backend.enqueue(records)[0].status is TaskResultStatus.READY


def test_a_savepoint_rolled_back_takes_only_its_own_tasks(
    database: PostgresDatabase, make_backend: Callable[..., PostgresBackend]
) -> None:
    """A task written in a savepoint rolled back is gone; one written before it commits."""
    backend = make_backend()
    kept, dropped = tasks(2)
    with psycopg.connect(database.url) as conn:
        backend.enqueue_on(conn, [kept])
        with contextlib.suppress(Rollback), conn.transaction():
            backend.enqueue_on(conn, [dropped])
            raise Rollback
        conn.commit()
    assert claimed(backend) == [kept.id]
    assert backend.get(dropped.id) is None


def test_a_first_transaction_rolled_back_leaves_the_namespace_in_place(
    database: PostgresDatabase, make_backend: Callable[..., PostgresBackend]
) -> None:
    """The schema is made outside the caller's transaction: after a new namespace's first
    enqueue_on is rolled back, the namespace is there and works."""
    backend = make_backend()
    with psycopg.connect(database.url) as conn:
        backend.enqueue_on(conn, tasks(1))
        conn.rollback()
    assert backend.counts() == {}
    assert len(backend.enqueue(tasks(1))) == 1


def test_a_refused_statement_raises_and_leaves_the_transaction_to_the_caller(
    database: PostgresDatabase, make_backend: Callable[..., PostgresBackend]
) -> None:
    """A value the server refuses raises PostgresBackendError naming enqueue_on; nothing stored."""
    backend = make_backend()
    with psycopg.connect(database.url, autocommit=True) as admin:
        admin.execute(
            f'ALTER TABLE "{backend.namespace}".tasks '
            "ADD CONSTRAINT refused CHECK (queue <> 'no')"
        )
    with psycopg.connect(database.url) as conn:
        with pytest.raises(PostgresBackendError, match="enqueue_on"):
            backend.enqueue_on(conn, tasks(1, queue="no"))
        conn.rollback()
    assert backend.counts() == {}


def test_a_connection_to_another_database_is_refused_before_anything_is_written(
    database: PostgresDatabase, make_backend: Callable[..., PostgresBackend]
) -> None:
    """A connection on the server's ``postgres`` database, holding a schema of the namespace's
    name: PostgresBackendError names both databases, and neither stores the task."""
    backend = make_backend()
    other_url = database.url.replace(database.name, "postgres")
    other = PostgresBackend.from_url(other_url, namespace=backend.namespace)
    try:
        with psycopg.connect(other_url) as conn:
            with pytest.raises(PostgresBackendError, match=r"database 'postgres'.*nothing was"):
                backend.enqueue_on(conn, tasks(1))
            conn.rollback()
        assert other.counts() == {}
        assert backend.counts() == {}
    finally:
        drop_namespace(other)


def test_a_connection_is_identified_once(
    database: PostgresDatabase, make_backend: Callable[..., PostgresBackend]
) -> None:
    """The second enqueue_on on one connection sends only the enqueue statement."""
    backend = make_backend()
    with psycopg.connect(database.url) as conn:
        backend.enqueue_on(conn, tasks(1))
        sent: list[str] = []
        original = psycopg.Cursor.execute

        def counting(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            sent.append(str(query))
            return original(self, query, *args, **kwargs)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(psycopg.Cursor, "execute", counting)
            backend.enqueue_on(conn, tasks(1))
        conn.commit()
    assert len(sent) == 1
    assert "pg_postmaster_start_time" not in sent[0]
