"""Fixtures for the Redis backend's own tests: clients, harnesses, and instrumented connections.

Real-Redis tests use the session's `redis_server` (tests/conftest.py); tests
that make sense on both take `client`, parametrized over fakeredis and redis.
"""

from __future__ import annotations

import collections
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import fakeredis
import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.conftest import RedisServer
from threadmill_core.ids import new_task_id
from threadmill_core.models import TaskResult
from threadmill_core.testing import Harness
from threadmill_redis.testing import make_harness

RESULT_TTL = timedelta(hours=1)


class CountingConnection(redis.Connection):
    """A connection that counts round trips: every packet sent is one (a pipeline is one)."""

    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        type(self).sent += 1
        super().send_packed_command(command, check_health)


class DroppingConnection(redis.Connection):
    """A connection that, when armed, reads a reply and then drops, as if the reply was lost.

    `drop(sha, times)` arms it: the next `times` replies to an EVALSHA of
    `sha` are read (so the server has applied the script) and then thrown
    away with a `ConnectionError`.
    """

    armed: dict[bytes, int] = {}  # noqa: RUF012 - shared on purpose: the pool makes the instances

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        # Connected first, so that a reconnect's own handshake (sent through
        # here too) is not taken for the command.
        self.connect()
        chunks = command if isinstance(command, list) else [command]
        self._last = b"".join(bytes(chunk) for chunk in chunks)
        super().send_packed_command(command, check_health)

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        response = super().read_response(*args, **kwargs)
        for sha, times in self.armed.items():
            if times and sha in self._last:
                self.armed[sha] = times - 1
                self.disconnect()
                raise redis.ConnectionError("the reply was lost (test)")
        return response

    @classmethod
    def drop(cls, sha: str, times: int = 1) -> None:
        cls.armed[sha.encode()] = times


def instrumented_client(
    server: RedisServer, connection_class: type[redis.Connection]
) -> redis.Redis:
    """A client of `server` on `connection_class`, without redis-py's own retries."""
    pool = redis.ConnectionPool(
        connection_class=connection_class,
        host="127.0.0.1",
        port=server.port,
        retry=Retry(NoBackoff(), 0),
    )
    return redis.Redis(connection_pool=pool)


@pytest.fixture
def real_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(
    params=[
        pytest.param("fakeredis", marks=pytest.mark.fakeredis),
        pytest.param("redis", marks=pytest.mark.redis),
    ]
)
def client(request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    """A client of fakeredis or of the session's real redis-server."""
    if request.param == "fakeredis":
        yield fakeredis.FakeRedis()
    else:
        yield request.getfixturevalue("real_client")


@pytest.fixture
def harness_on() -> Iterator[Callable[..., Harness]]:
    """Build harnesses (fresh namespaces) over a client; all are closed afterwards."""
    built: list[Harness] = []

    def make(client: redis.Redis, **options: Any) -> Harness:
        options.setdefault("result_ttl", RESULT_TTL)
        built.append(make_harness(client, **options))
        return built[-1]

    yield make
    for harness in built:
        harness.close()


@pytest.fixture
def harness(client: redis.Redis, harness_on: Callable[..., Harness]) -> Harness:
    """A fresh namespace on `client`."""
    return harness_on(client)


def tasks(count: int, **fields: Any) -> list[TaskResult]:
    """`count` new task records (defaults: queue "default", priority 0)."""
    return [
        TaskResult(id=new_task_id(), task_path="app.tasks:work", args=[i], **fields)
        for i in range(count)
    ]


def script_commands(
    client: redis.Redis,
    fn: Callable[[], object],
    *,
    on_key: Callable[[str], bool] = lambda key: True,
) -> collections.Counter[str]:
    """The commands Lua scripts ran on the server while `fn` ran, by name (MONITOR).

    `on_key` picks commands by their first argument: the key, for every
    command the scripts run. Only `client`'s server is watched, so `fn` must
    use the same one.
    """
    marker = f"end-{uuid.uuid4().hex}"
    spent: collections.Counter[str] = collections.Counter()
    with client.monitor() as monitor:  # type: ignore[no-untyped-call]  # redis-py leaves monitor untyped
        fn()
        client.echo(marker)
        while marker not in (event := monitor.next_command())["command"]:
            name, _, rest = event["command"].partition(" ")
            if event.get("client_type") == "lua" and on_key(rest.split(" ", 1)[0]):
                spent[name.upper()] += 1
    return spent
