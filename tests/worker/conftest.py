"""Fixtures for the worker-process tests: a real Redis and a fresh namespace per test."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
import redis

from tests.conftest import RedisServer
from threadmill_core import Broker, connect

pytestmark = pytest.mark.redis


@pytest.fixture
def namespace() -> str:
    return f"wt-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def broker_url(redis_server: RedisServer, namespace: str) -> str:
    return f"{redis_server.url}?namespace={namespace}"


@pytest.fixture
def broker(broker_url: str) -> Iterator[Broker]:
    with connect(broker_url) as made:
        yield made


@pytest.fixture
def read_events(redis_server: RedisServer, namespace: str) -> Iterator[Callable[[], list[str]]]:
    """Reads the runs the recording tasks logged under this test's namespace, in order."""
    client = redis.Redis.from_url(redis_server.url)
    key = f"threadmill-test:{namespace}"
    yield lambda: [event.decode() for event in client.lrange(key, 0, -1)]
    client.delete(key)
    client.close()
