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

from tests.conftest import RedisServer
from tests.faults.servers import (
    Cluster,
    Server,
    TlsFiles,
    TlsServer,
    durable_server,
    make_tls_files,
)


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
