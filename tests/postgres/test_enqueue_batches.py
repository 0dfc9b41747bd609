"""A batch longer than `enqueue_batch` is stored whole or not at all."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.conftest import PostgresDatabase
from tests.postgres.conftest import DroppingConnection, admin, tasks
from threadmill_postgres import PostgresBackend, PostgresBackendError, PostgresUnavailable
from threadmill_postgres.schema import quote_ident

pytestmark = pytest.mark.postgres

#: Records per statement in these tests: a batch of five takes three statements.
SLICE = 2


@pytest.fixture
def dropping_backend(
    make_backend: Callable[..., PostgresBackend],
) -> Iterator[PostgresBackend]:
    """A backend of slices of `SLICE`, whose connections drop when armed."""
    DroppingConnection.armed.clear()
    DroppingConnection.dropped.clear()
    yield make_backend(enqueue_batch=SLICE, connection_class=DroppingConnection)
    DroppingConnection.armed.clear()


def test_a_batch_whose_last_slice_the_server_refuses_stores_nothing(
    database: PostgresDatabase, make_backend: Callable[..., PostgresBackend]
) -> None:
    """The server refuses a value of the third slice: nothing of the five is stored; a resend is."""
    backend = make_backend(enqueue_batch=SLICE)
    table = f"{quote_ident(backend.namespace)}.tasks"
    admin(database, f"ALTER TABLE {table} ADD CONSTRAINT refused CHECK (queue <> 'refused')")
    records = [*tasks(4), *tasks(1, queue="refused")]
    with pytest.raises(PostgresBackendError, match="refused"):
        backend.enqueue(records)
    assert backend.counts() == {}
    assert all(backend.get(record.id) is None for record in records)
    admin(database, f"ALTER TABLE {table} DROP CONSTRAINT refused")
    stored = backend.enqueue(records)
    assert [r.id for r in stored] == [r.id for r in records]
    counts = backend.counts()
    assert (counts["default"].ready, counts["refused"].ready) == (4, 1)


def test_a_batch_cut_off_in_a_later_slice_every_time_stores_nothing(
    dropping_backend: PostgresBackend,
) -> None:
    """The connection drops at the second slice on every try: an outage, and nothing stored."""
    backend = dropping_backend
    records = tasks(5)
    # Each try: the first slice goes through, the second is cut off before it is sent.
    DroppingConnection.arm(backend.sql.enqueue, *["", "before"] * 3)
    with pytest.raises(PostgresUnavailable):
        backend.enqueue(records)
    assert DroppingConnection.dropped == {"before": 3}
    assert backend.counts() == {}


def test_a_batch_cut_off_once_in_a_later_slice_is_stored_once(
    dropping_backend: PostgresBackend,
) -> None:
    """One drop at the second slice: the whole batch is sent again and stored once."""
    backend = dropping_backend
    records = tasks(5)
    DroppingConnection.arm(backend.sql.enqueue, "", "before")
    stored = backend.enqueue(records)
    assert DroppingConnection.dropped == {"before": 1}
    assert [r.id for r in stored] == [r.id for r in records]
    assert backend.counts()["default"].ready == 5
