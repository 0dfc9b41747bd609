"""The driver boundary: which errors are outages, which are repeated, and that none slips past."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import attrs
import pytest
import redis
from redis.exceptions import (
    BusyLoadingError,
    ClusterDownError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    TryAgainError,
)

from tests.conftest import RedisServer
from tests.core import tasks
from threadmill_core import TaskResultStatus, connect
from threadmill_core.errors import BackendUnavailable, InvalidOption
from threadmill_core.ids import new_task_id
from threadmill_core.models import Decision, TaskResult
from threadmill_redis import RedisBackend, RedisBackendError, RedisUnavailable, boundary, clients


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The pauses `boundary.call` takes between repeats, recorded instead of slept."""
    taken: list[float] = []
    monkeypatch.setattr(boundary.time, "sleep", taken.append)
    return taken


def failing(*errors: Exception) -> Callable[[], str]:
    """A call that raises `errors` in turn, then answers "ok"."""
    pending = list(errors)

    def call() -> str:
        if pending:
            raise pending.pop(0)
        return "ok"

    return call


def test_an_outage_is_a_backend_unavailable_and_a_connection_error() -> None:
    """RedisUnavailable is the core's BackendUnavailable, so workers ride it out."""
    assert issubclass(RedisUnavailable, BackendUnavailable)
    assert issubclass(RedisUnavailable, ConnectionError)
    assert issubclass(RedisUnavailable, RedisBackendError)


def test_a_repeatable_call_is_repeated_after_a_dropped_connection(pauses: list[float]) -> None:
    """Two dropped connections are repeated after 50 and 100 ms, and the third send answers."""
    call = failing(redis.ConnectionError("reset"), redis.TimeoutError("timed out"))
    assert boundary.call(call, repeatable=True, what="test") == "ok"
    assert pauses == [0.05, 0.1]


def test_a_repeatable_call_gives_up_after_its_repeats(pauses: list[float]) -> None:
    """A third dropped connection raises RedisUnavailable naming the operation."""
    call = failing(*[redis.ConnectionError("reset")] * 3)
    with pytest.raises(RedisUnavailable, match="during claim"):
        boundary.call(call, repeatable=True, what="claim")
    assert len(pauses) == 2


def test_a_call_that_may_not_be_repeated_raises_at_once(pauses: list[float]) -> None:
    """A cancel whose connection dropped is not sent again."""
    with pytest.raises(RedisUnavailable):
        boundary.call(failing(redis.ConnectionError("reset")), repeatable=False, what="cancel")
    assert pauses == []


@pytest.mark.parametrize(
    "error",
    [
        BusyLoadingError("LOADING Redis is loading the dataset in memory"),
        ClusterDownError("CLUSTERDOWN The cluster is down"),
        TryAgainError("TRYAGAIN Multiple keys request during rehashing of slot"),
        RedisClusterException("Redis Cluster cannot be connected"),
        OutOfMemoryError("command not allowed when used memory > 'maxmemory'"),
        ReadOnlyError("You can't write against a read only replica."),
    ],
    ids=["loading", "cluster-down", "try-again", "no-node", "out-of-memory", "read-only"],
)
def test_a_server_not_ready_for_us_is_an_outage(error: Exception, pauses: list[float]) -> None:
    """Loading after a restart, a cluster in trouble, full memory, a replica: all outages."""
    with pytest.raises(RedisUnavailable):
        boundary.call(failing(error), repeatable=False, what="test")


@pytest.mark.parametrize(
    "error",
    [
        redis.AuthenticationError("WRONGPASS invalid username-password pair"),
        redis.ResponseError("ERR unknown command"),
        redis.exceptions.NoPermissionError("NOPERM no permissions"),
    ],
    ids=["credentials", "error-reply", "no-permission"],
)
def test_what_waiting_cannot_fix_is_not_an_outage(error: Exception, pauses: list[float]) -> None:
    """Refused credentials and error replies raise RedisBackendError, never an outage."""
    with pytest.raises(RedisBackendError) as info:
        boundary.call(failing(error), repeatable=True, what="test")
    assert not isinstance(info.value, BackendUnavailable)
    assert pauses == []


@pytest.mark.parametrize(
    "error",
    [
        TypeError("ConnectionPool.get_connection() missing 1 required positional argument"),
        AttributeError("'Connection' object has no attribute '_sock'"),
        KeyError("command_name"),
    ],
    ids=["type-error", "attribute-error", "key-error"],
)
def test_a_driver_that_breaks_raises_a_backend_error_not_its_own(
    error: Exception, pauses: list[float]
) -> None:
    """Whatever the driver raises by mistake comes out as RedisBackendError, caused by it."""
    with pytest.raises(RedisBackendError, match=f"during enqueue: {type(error).__name__}") as info:
        boundary.call(failing(error), repeatable=True, what="enqueue")
    assert info.value.__cause__ is error
    assert not isinstance(info.value, BackendUnavailable)
    assert pauses == []


class BrokenConnection(redis.Connection):
    """A connection whose API is not the one the backend calls (a driver of another version)."""

    def send_command(self, *args: object, **kwargs: object) -> None:
        raise TypeError("send_command() got an unexpected keyword argument")


class BrokenPool(redis.ConnectionPool):
    """A pool of broken connections, whose own API differs too."""

    def __init__(self) -> None:
        super().__init__(connection_class=BrokenConnection)

    def get_connection(self, *args: object, **kwargs: object) -> redis.Connection:
        raise TypeError("ConnectionPool.get_connection() missing 1 required positional argument")


def test_every_operation_of_a_broken_driver_raises_a_backend_error() -> None:
    """No operation lets the driver's own exception through: each is a RedisBackendError.

    Both ways to the server are broken: the pool's (pipelines, blocking
    waits, reads through the client) and the thread's own connection (script calls).
    """
    backend = RedisBackend(redis.Redis(connection_pool=BrokenPool()), namespace="broken")
    operations: list[Callable[[], object]] = [
        backend.now,
        lambda: backend.enqueue([tasks_record() for _ in range(3)]),
        lambda: backend.claim(["default"], worker="w", lease_ttl=timedelta(minutes=1)),
        lambda: backend.get("t"),
        backend.counts,
        lambda: backend.cancel("t"),
        lambda: backend.wait_for_tasks(["default"], timedelta(milliseconds=10)),
    ]
    for operation in operations:
        with pytest.raises(RedisBackendError) as info:
            operation()
        assert isinstance(info.value.__cause__, TypeError)


def tasks_record() -> TaskResult:
    return TaskResult(id=new_task_id(), task_path="app:work")


def test_a_cluster_url_naming_a_database_is_refused() -> None:
    """A cluster has database 0 only: another is an InvalidOption before anything connects."""
    with pytest.raises(InvalidOption, match="database 0 only"):
        clients.client_from_url("redis+cluster://127.0.0.1:7000/2", "")


def test_the_socket_timeout_is_read_from_the_client() -> None:
    """The blocking wait reads the socket timeout a client was built with (None for none)."""
    with redis.Redis(socket_timeout=7.5) as timed, redis.Redis(socket_timeout=None) as untimed:
        assert clients.socket_timeout(timed) == 7.5
        assert clients.socket_timeout(untimed) is None


def test_a_url_without_a_socket_timeout_gets_the_one_its_connections_have() -> None:
    """A client built from a URL that names no socket timeout reports the one its connections
    get from redis-py (5 s since redis-py 8), so the blocking wait stays below it."""
    for url in ("redis://127.0.0.1:6379/0", "redis+sentinel://127.0.0.1:26379/m/0"):
        client = clients.client_from_url(url, "")
        made = client.connection_pool.make_connection()
        assert clients.socket_timeout(client) == made.socket_timeout, url
        client.close()


@pytest.mark.redis
def test_a_unix_socket_url_reaches_the_server(tmp_path: Path) -> None:
    """``unix:///path/to/redis.sock`` works end to end: enqueue, claim and acknowledge."""
    socket_path = tmp_path / "redis.sock"
    server = RedisServer("--unixsocket", str(socket_path))
    try:
        broker = connect(f"unix://{socket_path}?namespace=unix-{uuid.uuid4().hex}")
        try:
            [record] = broker.enqueue_many(tasks.echo, [((1,), {})])
            [lease] = broker.backend.claim(["default"], worker="w", lease_ttl=timedelta(minutes=1))
            assert lease.task_id == record.id
            done = attrs.evolve(lease.record, status=TaskResultStatus.SUCCESSFUL, return_value=1)
            [stored] = broker.backend.decide_many([Decision(lease=lease, record=done)])
            assert stored is not None
            assert broker.get_result(record.id).return_value == 1
        finally:
            broker.close()
    finally:
        server.close()
