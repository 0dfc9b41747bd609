"""Fixtures for the PostgreSQL backend's own tests: namespaces, harnesses, instrumented connections.

Every test here runs on the session's database (`postgres_database` in
tests/conftest.py), each in namespaces of its own that are dropped after it.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any, ClassVar

import psycopg
import pytest

from tests.conftest import PostgresDatabase
from threadmill_core.ids import new_task_id
from threadmill_core.models import TaskResult
from threadmill_core.testing import Harness
from threadmill_postgres import PostgresBackend
from threadmill_postgres.testing import drop_namespace, make_harness, new_namespace

RESULT_TTL = timedelta(hours=1)
LEASE = timedelta(seconds=30)


def tasks(count: int, **fields: Any) -> list[TaskResult]:
    """New records of a made-up task (never run), numbered in their args."""
    return [
        TaskResult(id=new_task_id(), task_path="app:work", args=[n], **fields) for n in range(count)
    ]


class CountingConnection(psycopg.Connection[tuple[Any, ...]]):
    """A pool connection that records every statement it executes (its text, in order).

    On an autocommit connection each ``execute`` outside a transaction block
    is one round trip and one commit.
    """

    executed: ClassVar[list[str]] = []
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        with self._lock:
            self.executed.append(str(query))
        return super().execute(query, params, **kwargs)


class DroppingConnection(psycopg.Connection[tuple[Any, ...]]):
    """A pool connection that, when armed, drops as it runs a statement, before or after it.

    ``arm(statement, "after")``: the next execution of `statement` runs (and,
    on an autocommit connection, commits), then the connection closes and
    the call raises `psycopg.OperationalError`, as when a reply is lost.
    ``"before"``: the connection closes and raises without sending it.
    """

    armed: ClassVar[dict[str, list[str]]] = {}
    dropped: ClassVar[collections.Counter[str]] = collections.Counter()
    _lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def arm(cls, statement: str, *when: str) -> None:
        with cls._lock:
            cls.armed.setdefault(statement, []).extend(when)

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        text = str(query)
        with self._lock:
            plan = self.armed.get(text)
            when = plan.pop(0) if plan else None
            if when:
                self.dropped[when] += 1
        if when == "before":
            self.close()
            raise psycopg.OperationalError("the connection was lost before sending (test)")
        cursor = super().execute(query, params, **kwargs)
        if when == "after":
            self.close()
            raise psycopg.OperationalError("the reply was lost (test)")
        return cursor


@pytest.fixture
def database(postgres_database: PostgresDatabase) -> PostgresDatabase:
    return postgres_database


@pytest.fixture
def make_backend(database: PostgresDatabase) -> Iterator[Callable[..., PostgresBackend]]:
    """Backends on fresh namespaces (or the one named) of the session's database; dropped after."""
    built: list[PostgresBackend] = []

    def make(**options: Any) -> PostgresBackend:
        options.setdefault("namespace", new_namespace())
        options.setdefault("result_ttl", RESULT_TTL)
        backend = PostgresBackend.from_url(database.url, **options)
        built.append(backend)
        return backend

    yield make
    dropped: set[str] = set()
    for backend in built:
        backend.close()
        if backend.namespace not in dropped:
            dropped.add(backend.namespace)
            drop_namespace(backend)


@pytest.fixture
def harness(database: PostgresDatabase) -> Iterator[Harness]:
    """A backend on a fresh namespace and the exact clock (see threadmill_postgres.testing)."""
    made = make_harness(database.url, result_ttl=RESULT_TTL, exact=True)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def counted(database: PostgresDatabase) -> Iterator[Harness]:
    """A harness whose pool connections count the statements they run."""
    made = make_harness(
        database.url, result_ttl=RESULT_TTL, exact=True, connection_class=CountingConnection
    )
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def dropping(database: PostgresDatabase) -> Iterator[Harness]:
    """A harness whose pool connections drop when armed (see `DroppingConnection`)."""
    DroppingConnection.armed.clear()
    DroppingConnection.dropped.clear()
    made = make_harness(
        database.url, result_ttl=RESULT_TTL, exact=True, connection_class=DroppingConnection
    )
    try:
        yield made
    finally:
        DroppingConnection.armed.clear()
        made.close()


def admin(database: PostgresDatabase, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    """Run one statement on the session's database on a connection of its own; its rows."""
    with psycopg.connect(database.url, autocommit=True) as conn:
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description is not None else []
