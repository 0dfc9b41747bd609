"""A connection per thread for the backend's single commands, made and used through redis-py's API.

``Redis.execute_command`` takes a connection from the pool and gives it back
for every command, with its retry, health-check and observability machinery
around it. For one short command that machinery costs the client several
times what sending the command and reading its reply cost (the commit that
added this module has the counts), and the backend's hot calls (a single
enqueue, a claim, a batch of decisions, a round of heartbeats, an idle
worker's blocking wait) are one command each. So each thread sends them on
a connection of its own, kept for the thread's life.

The connection is redis-py's own: made like the pool's connections
(`ConnectionPool.connection_class` with `connection_kwargs`, the pool's
public settings, so TLS, credentials, timeouts and the test suite's fault
injecting connection classes all apply), and used only through redis-py's
connection interface: `send_command`, `read_response`, `can_read` and
`disconnect`. The calls of a long batch go one after another on the same
connection, each sent while the server runs the one before (`execute_each`).
Packing, parsing, connecting and reconnecting stay redis-py's. A call that
fails other than by an error reply leaves the connection in an unknown
state, so it is disconnected, and the next call reconnects. Errors are the
driver's; the caller runs calls inside `threadmill_redis.boundary.call`.

Only single-server clients (`redis.Redis`) are served this way. A cluster
client picks a node per key, so its commands go through the client.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import redis


class ThreadConnections:
    """Connections to `client`'s server, one per thread (and process), made on first use."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._start()
        _EVERY.add(self)

    def _start(self) -> None:
        """No connection yet: each thread makes its own on first use."""
        self._local = threading.local()
        self._lock = threading.Lock()  # anew in a forked child: the parent's may have been held
        #: Every connection made, so `close` reaches those of other threads; a
        #: thread's connection goes with the thread.
        self._made: weakref.WeakSet[Any] = weakref.WeakSet()

    def execute(self, *args: Any) -> Any:
        """Send one command and return its reply (redis-py's exception for an error reply).

        The connection is checked first, as the pool checks one it hands
        out: one the server closed meanwhile (an idle timeout, a restart,
        CLIENT KILL) is reopened, so no command is sent on a dead connection.
        """
        connection = self._connection()
        _ready(connection)
        try:
            connection.send_command(*args)
            return connection.read_response()
        except redis.ResponseError:
            raise  # the whole error reply was read: the connection is in step
        except BaseException:
            connection.disconnect()
            raise

    def execute_each(
        self, commands: Iterable[Sequence[Any]], answer: Callable[[int, Any], None]
    ) -> None:
        """Send `commands` in order, each as soon as the iterable makes it; `answer` each reply.

        A reply is read once the next command is sent, so the server runs one
        command while the caller makes the next and reads the one before: at
        most two are in flight. `answer(index, reply)` gets the replies in
        order; an error reply is given as the driver's exception, not raised
        (the whole reply was read, so the connection is in step). A command
        that never got an answer was sent or not: the caller repeats only
        what may be repeated (see `threadmill_redis.boundary`).
        """
        connection = self._connection()
        _ready(connection)
        sent = answered = 0
        try:
            for args in commands:
                connection.send_command(*args)
                sent += 1
                if sent - answered > 1:
                    answer(answered, _reply(connection))
                    answered += 1
            while answered < sent:
                answer(answered, _reply(connection))
                answered += 1
        except BaseException:
            connection.disconnect()  # replies may be unread: the connection is out of step
            raise

    def _connection(self) -> Any:
        local = self._local
        connection = getattr(local, "connection", None)
        if connection is None:
            pool = self._client.connection_pool  # its public settings: class and kwargs
            connection = local.connection = pool.connection_class(**pool.connection_kwargs)
            with self._lock:
                self._made.add(connection)
        return connection

    def close(self) -> None:
        """Disconnect every connection made here; a later call reconnects."""
        with self._lock:
            made = list(self._made)
        for connection in made:
            connection.disconnect()


#: Every `ThreadConnections`, for `_forget_in_child`.
_EVERY: weakref.WeakSet[ThreadConnections] = weakref.WeakSet()


def _forget_in_child() -> None:
    """In a forked child: the parent's connections are not the child's to use, nor to close.

    Told by the fork, not by comparing ``os.getpid()`` on every call: that
    is a system call, and on an idle producer's or worker's path to Redis
    each one costs as much as the Python around it.
    """
    for connections in list(_EVERY):
        connections._start()


os.register_at_fork(after_in_child=_forget_in_child)


def _reply(connection: Any) -> Any:
    """The next reply on `connection`; an error reply as the driver's exception, returned."""
    try:
        return connection.read_response()
    except redis.ResponseError as exc:
        return exc


def _ready(connection: Any) -> None:
    """Connect `connection`, and reconnect it if it has something to read: what the pool does.

    `can_read` connects a connection that is not connected (and then finds
    nothing to read), so a connected one costs one poll of its socket.
    """
    try:
        if connection.can_read():  # a socket the server closed reads as end of file
            raise redis.ConnectionError("the connection has unread data")
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        connection.disconnect()
        connection.connect()
        if connection.can_read():
            raise redis.ConnectionError("the connection is not ready") from None
