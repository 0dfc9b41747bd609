"""Cancelling a running task on a real Redis: the request reaches the worker's heartbeat."""

from __future__ import annotations

import uuid

import pytest
import redis

from tests.core.running_checks import check_cancel_of_a_running_task
from threadmill_core import Broker
from threadmill_redis import RedisBackend

pytestmark = pytest.mark.redis


def test_cancelling_a_running_task_stops_it_within_a_beat(real_client: redis.Redis) -> None:
    """A running task cancelled on Redis ends CANCELLED within a heartbeat interval, its
    finally ran, and a late acknowledgement is refused."""
    backend = RedisBackend(real_client, namespace=f"cancel-{uuid.uuid4().hex}")
    check_cancel_of_a_running_task(Broker(backend, url="redis://"))
