"""Fixtures for the fault tests: servers to kill, TLS and password servers, a cluster.

Each fixture stops what it started, whatever the test did to it. Runs and
acknowledgements of `fault_tasks.work` are logged on the session's server
(`log_url`), which no test kills.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from tests.conftest import PostgresDatabase, RedisServer
from tests.faults.servers import (
    Cluster,
    Server,
    TlsFiles,
    TlsServer,
    durable_server,
    make_tls_files,
)
from threadmill_core import Broker, connect


@pytest.fixture
def namespace() -> str:
    return f"faults-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def durable() -> Iterator[Server]:
    """A fresh server with ``appendonly yes`` and ``appendfsync always``, for this test alone."""
    server = durable_server()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def log_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture
def read_events(redis_server: RedisServer) -> Iterator[Callable[[str], list[str]]]:
    """Reads the events `fault_tasks` logged under a tag, in order; deletes them afterwards."""
    client = redis.Redis.from_url(redis_server.url)
    tags: set[str] = set()

    def read(tag: str) -> list[str]:
        tags.add(tag)
        return [event.decode() for event in client.lrange(f"threadmill-test:{tag}", 0, -1)]

    yield read
    for tag in tags:
        client.delete(f"threadmill-test:{tag}")
    client.close()


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(Path(tmp_path_factory.mktemp("tls")))


@pytest.fixture(scope="module")
def tls_server(tls_files: TlsFiles) -> Iterator[TlsServer]:
    server = TlsServer(tls_files)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """Three masters made one cluster with ``redis-cli --cluster create``, for this module."""
    made = Cluster()
    try:
        yield made
    finally:
        made.close()


#: A fault test's backend by default (a module may define its own `broker_url`):
#: each test runs on the session's real Redis and on its PostgreSQL database.
@pytest.fixture(
    params=[
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]
)
def broker_url(request: pytest.FixtureRequest, namespace: str) -> str:
    if request.param == "redis":
        redis_server: RedisServer = request.getfixturevalue("redis_server")
        return f"{redis_server.url}?namespace={namespace}"
    database: PostgresDatabase = request.getfixturevalue("postgres_database")
    return f"{database.url}?namespace={namespace}"


@pytest.fixture
def broker(broker_url: str) -> Iterator[Broker]:
    with connect(broker_url) as made:
        yield made
