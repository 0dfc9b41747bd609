"""Cancelling a running task on PostgreSQL: the request reaches the worker's heartbeat."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.core.running_checks import check_cancel_of_a_running_task
from threadmill_core import Broker
from threadmill_postgres import PostgresBackend

pytestmark = pytest.mark.postgres


def test_cancelling_a_running_task_stops_it_within_a_beat(
    make_backend: Callable[..., PostgresBackend],
) -> None:
    """A running task cancelled on PostgreSQL ends CANCELLED within a heartbeat interval, its
    finally ran, and a late acknowledgement is refused."""
    check_cancel_of_a_running_task(Broker(make_backend(), url="postgresql://"))
