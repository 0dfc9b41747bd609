"""The backend's connections, redis-py's own: reopened when the server closed them, and more.

Every command goes through the client's connection pool, which checks a
connection before it hands it out, gives each thread a connection of its
own and a forked child new ones; these tests hold the backend to that: no
call rides on a dead connection, scripts the server forgot are loaded
again, and `close` closes what the backend opened.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from tests.conftest import RedisServer
from tests.redis.conftest import tasks
from threadmill_core.models import TaskResultStatus
from threadmill_redis import RedisBackend
from threadmill_redis.testing import delete_namespace

pytestmark = pytest.mark.redis

REPEATING = "repeating the call"


@pytest.fixture
def backend(redis_server: RedisServer) -> Iterator[RedisBackend]:
    built = RedisBackend.from_url(f"{redis_server.url}?namespace=pooled-{uuid.uuid4().hex}")
    try:
        yield built
    finally:
        delete_namespace(built)


def kill_clients(admin: redis.Redis) -> None:
    """Have the server close every client connection but the admin's own."""
    admin.client_kill_filter(_type="normal", skipme=True)


@pytest.mark.parametrize("repeatable", [False, True], ids=["cancel", "enqueue"])
def test_a_connection_the_server_closed_is_reopened_before_the_call(
    backend: RedisBackend,
    real_client: redis.Redis,
    caplog: pytest.LogCaptureFixture,
    repeatable: bool,
) -> None:
    """Whether or not the call could be repeated, it never rides on a dead connection.

    The client's pool checks each connection it hands out: one the server
    closed a moment ago (an idle timeout, a restart, CLIENT KILL) is
    reopened, not sent on, so not even a call that may not be repeated fails.
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


def test_scripts_the_server_forgot_are_loaded_again(
    redis_server: RedisServer, real_client: redis.Redis
) -> None:
    """After SCRIPT FLUSH, a lone call and a pipelined batch load their scripts and go through.

    Each is answered NOSCRIPT first, which means it never ran: the script
    is loaded and the calls sent again, stored once.
    """
    built = RedisBackend.from_url(
        f"{redis_server.url}?namespace=pooled-{uuid.uuid4().hex}&enqueue_batch=3"
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


def test_close_closes_the_connections_and_a_later_call_opens_one(
    redis_server: RedisServer, real_client: redis.Redis
) -> None:
    """close() disconnects every connection the backend opened; it still works afterwards."""

    def clients() -> set[str]:
        return {c["id"] for c in real_client.client_list()}

    before = clients()
    built = RedisBackend.from_url(f"{redis_server.url}?namespace=pooled-{uuid.uuid4().hex}")
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
