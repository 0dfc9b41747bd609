"""The scripts' held connections: reopened when the server closed them, reloaded scripts, forks.

`RedisBackend` runs its scripts on connections it keeps out of the client's
pool (`connection.HeldConnections`); these tests hold them to what the pool
guaranteed: a connection the server closed is reopened, not failed, so no
call rides on a dead connection; threads and forked children each get
connections of their own.
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Iterator
from datetime import timedelta

import pytest
import redis

from tests.conftest import RedisServer
from tests.redis.conftest import tasks
from threadmill_core.models import TaskResultStatus
from threadmill_redis import RedisBackend, connection
from threadmill_redis.testing import delete_namespace

pytestmark = pytest.mark.redis

REPEATING = "repeating the call"


@pytest.fixture
def backend(redis_server: RedisServer) -> Iterator[RedisBackend]:
    built = RedisBackend.from_url(f"{redis_server.url}?namespace=held-{uuid.uuid4().hex}")
    try:
        yield built
    finally:
        delete_namespace(built)


def kill_clients(admin: redis.Redis) -> None:
    """Have the server close every client connection but the admin's own."""
    admin.client_kill_filter(_type="normal", skipme=True)


def test_scripts_run_on_held_connections_for_a_plain_client_only(
    redis_server: RedisServer,
) -> None:
    """A plain client's scripts skip the pool; a blocking pool or a single connection keep it."""
    assert connection.HeldConnections.for_client(redis.Redis.from_url(redis_server.url))
    blocking = redis.BlockingConnectionPool.from_url(redis_server.url)
    assert connection.HeldConnections.for_client(redis.Redis(connection_pool=blocking)) is None
    single = redis.Redis.from_url(redis_server.url, single_connection_client=True)
    assert connection.HeldConnections.for_client(single) is None
    single.close()


@pytest.mark.parametrize("repeatable", [False, True], ids=["cancel", "enqueue"])
def test_a_connection_the_server_closed_is_reopened_before_the_call(
    backend: RedisBackend,
    real_client: redis.Redis,
    caplog: pytest.LogCaptureFixture,
    repeatable: bool,
) -> None:
    """Whether or not the call could be repeated, it never rides on a dead connection.

    What the pool did on every get, the held connections do on every lend:
    a connection the server closed a moment ago is reopened, not sent on.
    """
    caplog.set_level(logging.DEBUG, logger="threadmill_redis")
    [record] = backend.enqueue(tasks(1))
    kill_clients(real_client)
    if repeatable:
        [record] = backend.enqueue(tasks(1))
        assert backend.get(record.id) == record
    else:
        cancelled = backend.cancel(record.id)
        assert cancelled is not None
        assert cancelled.status is TaskResultStatus.CANCELLED
    assert REPEATING not in caplog.text


@pytest.mark.parametrize("poll", [True, False], ids=["poll", "can_read"])
def test_a_connection_is_lent_only_with_nothing_to_read(
    redis_server: RedisServer,
    real_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    poll: bool,
) -> None:
    """The check before a lend sees a reply nobody read, and a connection the server closed.

    A plain socket is asked with poll(2); without poll (Windows), or for a
    TLS socket, redis-py's ``can_read`` answers.
    """
    if not poll:
        monkeypatch.setattr(connection, "_POLL", None)

    def soon_readable(conn: redis.Connection) -> bool:
        deadline = time.monotonic() + 10
        while not connection._readable(conn) and time.monotonic() < deadline:
            time.sleep(0.001)  # on its way from the server
        return connection._readable(conn)

    client = redis.Redis.from_url(redis_server.url)
    conn = client.connection_pool.make_connection()
    try:
        conn.connect()
        assert not connection._readable(conn)
        conn.send_command("PING")
        assert soon_readable(conn)
        assert conn.read_response() in (b"PONG", "PONG", True)
        assert not connection._readable(conn)
        kill_clients(real_client)
        assert soon_readable(conn)
        conn.disconnect()
        # The closed socket's descriptor is taken by another, so the new socket's
        # differs: asked through the old socket's poll, it would never be readable.
        squatter = socket.socket()
        try:
            conn.connect()
            assert not connection._readable(conn)
            conn.send_command("PING")
            assert soon_readable(conn)
        finally:
            squatter.close()
    finally:
        conn.disconnect()
        client.close()


def test_scripts_the_server_forgot_are_loaded_again(
    redis_server: RedisServer, real_client: redis.Redis
) -> None:
    """After SCRIPT FLUSH, a lone call and a pipelined batch load their scripts and go through.

    The second batch's script was run before the flush, so its calls are
    sent without a load ahead of them and answered NOSCRIPT.
    """
    built = RedisBackend.from_url(
        f"{redis_server.url}?namespace=held-{uuid.uuid4().hex}&enqueue_batch=3"
    )
    try:
        real_client.script_flush()
        [one] = built.enqueue(tasks(1))
        real_client.script_flush()
        first = built.enqueue(tasks(8))
        real_client.script_flush()
        second = built.enqueue(tasks(8))
        stored = [one, *first, *second]
        assert [built.get(r.id) for r in stored] == stored
    finally:
        delete_namespace(built)


def test_a_pipeline_loads_a_script_new_to_it_ahead_of_its_calls(
    redis_server: RedisServer, real_client: redis.Redis
) -> None:
    """On a server without the script, each of a batch's calls is sent once, not again."""
    built = RedisBackend.from_url(
        f"{redis_server.url}?namespace=held-{uuid.uuid4().hex}&enqueue_batch=10"
    )

    def calls() -> dict[str, int]:
        stats = real_client.info("commandstats")
        count = {n: stats.get(f"cmdstat_{n}", {}).get("calls", 0) for n in ("evalsha", "script")}
        # Redis 7 counts SCRIPT LOAD apart, as script|load; 6 counts it as script.
        count["script|load"] = stats.get("cmdstat_script|load", {}).get(
            "calls", count.pop("script")
        )
        return count

    try:
        real_client.script_flush()
        before = calls()
        batch = built.enqueue(tasks(45))
        after = calls()
        assert after["evalsha"] - before["evalsha"] == 5
        assert after["script|load"] - before["script|load"] == 1
        more = built.enqueue(tasks(20))  # known now: no load ahead of it
        assert calls() == {"evalsha": after["evalsha"] + 2, "script|load": after["script|load"]}
        assert [built.get(r.id) for r in [*batch, *more]] == [*batch, *more]
    finally:
        delete_namespace(built)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_opens_its_own_connections(
    backend: RedisBackend, caplog: pytest.LogCaptureFixture
) -> None:
    """A child forked after the parent's calls enqueues on new connections; the parent's live on."""
    caplog.set_level(logging.DEBUG, logger="threadmill_redis")
    backend.enqueue(tasks(1))
    pid = os.fork()
    if pid == 0:  # the child: report by exit status only
        try:
            [record] = backend.enqueue(tasks(1, queue="child"))
            os._exit(0 if record.status is TaskResultStatus.READY else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    backend.enqueue(tasks(1))
    assert REPEATING not in caplog.text
    assert {q: c.ready for q, c in backend.counts().items()} == {"default": 2, "child": 1}


def test_threads_enqueue_at_once_each_on_a_connection_of_its_own(backend: RedisBackend) -> None:
    """Eight threads enqueueing together store every task once, in each thread's order."""
    stored: dict[int, list[str]] = {}

    def produce(n: int) -> None:
        stored[n] = [backend.enqueue(tasks(1, queue=f"q{n}"))[0].id for _ in range(50)]

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for n, ids in stored.items():
        assert [r.id for r in backend.peek(f"q{n}", TaskResultStatus.READY)] == ids


def test_close_closes_the_held_connections_and_a_later_call_opens_one(
    redis_server: RedisServer, real_client: redis.Redis
) -> None:
    """close() disconnects every connection the backend opened; it still works afterwards."""

    def clients() -> set[str]:
        return {c["id"] for c in real_client.client_list()}

    before = clients()
    built = RedisBackend.from_url(f"{redis_server.url}?namespace=held-{uuid.uuid4().hex}")
    try:
        built.enqueue(tasks(1))
        mine = clients() - before
        assert mine
        built.close()
        deadline = time.monotonic() + 10  # the server notices closed sockets as it gets to them
        while mine & clients() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not mine & clients()
        [record] = built.enqueue(tasks(1))
        assert built.get(record.id) == record
    finally:
        delete_namespace(built)


def test_closing_a_given_client_closes_the_connections_held_for_it(
    redis_server: RedisServer, real_client: redis.Redis
) -> None:
    """The held connections stay in use in the client's pool, so its close() closes them.

    A backend on a client it was given leaves the client open; whoever
    closes the client then closes every socket it made, these included.
    """

    def clients() -> set[str]:
        return {c["id"] for c in real_client.client_list()}

    before = clients()
    client = redis.Redis.from_url(redis_server.url)
    backend = RedisBackend(client, namespace=f"held-{uuid.uuid4().hex}")
    try:
        backend.enqueue(tasks(1))
        mine = clients() - before
        assert mine
        backend.close()  # a given client: its connections stay for the next backend
        assert mine <= clients()
        client.close()
        deadline = time.monotonic() + 10  # the server notices closed sockets as it gets to them
        while mine & clients() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not mine & clients()
        [record] = backend.enqueue(tasks(1))  # a closed client opens connections again
        assert backend.get(record.id) == record
    finally:
        delete_namespace(backend)
        client.close()


def test_backends_on_one_client_share_its_held_connections(
    redis_server: RedisServer, real_client: redis.Redis
) -> None:
    """Backends come and go on one client; its pool's limit is never reached.

    redis-py's pool counts every connection it ever made toward
    ``max_connections`` (100 by default), so connections per backend would
    run it out after a hundred backends, closed or not.
    """
    client = redis.Redis.from_url(redis_server.url, max_connections=5)
    before = {c["id"] for c in real_client.client_list()}
    try:
        for _ in range(3 * client.connection_pool.max_connections):
            backend = RedisBackend(client, namespace=f"held-{uuid.uuid4().hex}")
            [record] = backend.enqueue(tasks(1))
            assert backend.get(record.id) == record
            backend.close()
            delete_namespace(backend)
        assert len({c["id"] for c in real_client.client_list()} - before) <= 2
    finally:
        client.close()


def test_held_connections_go_with_their_client(
    redis_server: RedisServer, real_client: redis.Redis
) -> None:
    """Nothing keeps a dropped client's pool, or the connections held for it, alive."""

    client = redis.Redis.from_url(redis_server.url)
    backend = RedisBackend(client, namespace=f"held-{uuid.uuid4().hex}")
    backend.enqueue(tasks(1))
    delete_namespace(backend)
    pool = weakref.ref(client.connection_pool)
    del backend, client
    gc.collect()
    assert pool() is None


def test_a_long_pipeline_runs_its_first_commands_while_the_rest_are_made(
    redis_server: RedisServer, real_client: redis.Redis
) -> None:
    """`execute_many` writes as it packs, so the server works while the caller still builds.

    Each command here is larger than the write cutoff. The generator that
    yields them asks another connection, before yielding the next, whether
    the server has run the last one, waiting up to five seconds.
    """
    key = f"held-{uuid.uuid4().hex}"
    big = "x" * connection.SEND_CUTOFF
    seen: list[int] = []

    def commands() -> Iterator[tuple[str, ...]]:
        for n in range(1, 4):
            if n > 1:
                deadline = time.monotonic() + 5
                while real_client.llen(key) < n - 1 and time.monotonic() < deadline:
                    time.sleep(0.001)
                seen.append(real_client.llen(key))
            yield ("RPUSH", key, big)

    client = redis.Redis.from_url(redis_server.url)
    held = connection.HeldConnections.for_client(client)
    assert held is not None
    try:
        assert held.execute_many(commands()) == [1, 2, 3]
        assert seen == [1, 2]
    finally:
        real_client.delete(key)
        held.close()
        client.close()


def test_a_health_check_never_comes_between_a_pipelines_writes(
    redis_server: RedisServer, real_client: redis.Redis
) -> None:
    """With redis-py's health checks on, a long pipeline still reads its own replies.

    A check due before a later write would send a PING and read a reply that
    belongs to the pipeline. Only the first write may check, before any
    command is sent.
    """
    key = f"held-{uuid.uuid4().hex}"
    big = "x" * connection.SEND_CUTOFF

    def commands() -> Iterator[tuple[str, ...]]:
        yield ("RPUSH", key, big)
        time.sleep(1.1)  # the next write is past the check's interval
        yield ("RPUSH", key, big)
        yield ("LLEN", key)

    client = redis.Redis.from_url(redis_server.url, health_check_interval=1)
    held = connection.HeldConnections.for_client(client)
    assert held is not None
    try:
        held.execute(("PING",))  # the connection made, and its next check due in a second
        assert held.execute_many(commands()) == [1, 2, 2]
        assert real_client.llen(key) == 2
    finally:
        real_client.delete(key)
        held.close()
        client.close()


ECHO_ARGS = "return {KEYS[1], KEYS[2], unpack(ARGV)}"


@pytest.mark.parametrize("packer", ["hiredis", "python"])
def test_a_headed_call_sends_its_head_and_arguments_as_one_command(
    redis_server: RedisServer, packer: str
) -> None:
    """Each call's own arguments follow the head, packed once; redis-py's own packer does the same.

    The second case gives the connections redis-py's Python packer, which
    `execute_headed` leaves to pack the whole command.
    """
    kwargs = {} if packer == "hiredis" else {"command_packer": _python_packer()}
    client = redis.Redis.from_url(redis_server.url, **kwargs)
    held = connection.HeldConnections.for_client(client)
    assert held is not None
    sha = client.script_load(ECHO_ARGS)
    head = ("EVALSHA", sha, 2, "k:1", "k:ü")
    try:
        for args in [("a", 1, b"\x00\xff"), (), ("second", -7), ("ü" * 300,)]:
            sent = [a if isinstance(a, bytes) else str(a).encode() for a in args]
            assert held.execute_headed(head, args) == [b"k:1", "k:ü".encode(), *sent]
        # hiredis packs the head once, for every call; the Python packer is left alone.
        assert len(held._heads) == (1 if packer == "hiredis" else 0)
        # An argument the packer refuses: refused before anything is sent,
        # and the connection is still in step for the next call.
        with pytest.raises(redis.DataError):
            held.execute_headed(head, [{"not": "packable"}])
        assert held.execute_headed(head, ["after"]) == [b"k:1", "k:ü".encode(), b"after"]
    finally:
        client.close()


def _python_packer() -> object:
    from redis.connection import PythonRespSerializer

    return PythonRespSerializer(6000, redis.connection.Encoder("utf-8", "strict", False).encode)


def test_only_heads_that_come_again_are_kept(backend: RedisBackend) -> None:
    """An enqueue's head is kept for the next; a claim's names a receipt of its own: not kept."""
    held = backend._held
    assert held is not None
    stored = backend.enqueue(tasks(1)) + backend.enqueue(tasks(1))
    kept = dict(held._heads)
    assert len(kept) == 1  # both enqueues of one queue: one head
    claimed = [
        lease.task_id
        for _ in stored
        for lease in backend.claim(["default"], worker="w", lease_ttl=timedelta(seconds=30))
    ]
    assert claimed == [record.id for record in stored]
    assert held._heads == kept
