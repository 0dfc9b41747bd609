"""Cancel requests and progress on PostgreSQL: the shared checks, and a corrupt stored
progress."""

from __future__ import annotations

import pytest

from tests.conftest import PostgresDatabase
from tests.postgres.conftest import admin
from tests.redis.cancel_progress_checks import (
    LEASE,
    check_a_requested_task_going_back_ends_cancelled,
    check_progress_is_fenced,
    check_request_cancel_on_running,
    one_task,
)
from threadmill_core.models import Progress
from threadmill_core.testing import Harness
from threadmill_postgres import PostgresBackend
from threadmill_postgres.schema import quote_ident

pytestmark = pytest.mark.postgres


def test_request_cancel_on_running(harness: Harness) -> None:
    check_request_cancel_on_running(harness)


def test_progress_is_fenced(harness: Harness) -> None:
    check_progress_is_fenced(harness)


def test_a_requested_task_going_back_ends_cancelled(harness: Harness) -> None:
    check_a_requested_task_going_back_ends_cancelled(harness)


def test_a_corrupt_progress_reads_as_none_and_harms_nothing(
    harness: Harness, database: PostgresDatabase
) -> None:
    """A progress column that does not decode reads as none: the task is read, renewed and
    given a fresh progress as usual (it is no poison)."""
    backend = harness.backend
    assert isinstance(backend, PostgresBackend)
    backend.enqueue([one_task("t1")])
    [lease] = backend.claim(["default"], worker="w", lease_ttl=LEASE)
    table = f"{quote_ident(backend.options.namespace)}.tasks"
    admin(database, f"UPDATE {table} SET progress = %s WHERE id = 't1'", (b"not json",))
    stored = backend.get("t1")
    assert stored is not None
    assert stored.progress is None
    assert backend.extend(lease, LEASE) is not None
    assert backend.record_progress([(lease, Progress(done=1))]) == [True]
    fixed = backend.get("t1")
    assert fixed is not None
    assert fixed.progress is not None
    assert fixed.progress.done == 1
