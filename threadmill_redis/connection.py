"""Redis clients: built from URLs, and the one boundary where driver errors are translated.

Schemes: ``redis://`` and ``rediss://`` (TLS) and ``unix://`` reach one
server; ``redis+cluster://host:port`` reaches a Redis Cluster through any of
its nodes, with redis-py's cluster client. Every key of a namespace shares
one hash tag (see `threadmill_redis.keys`), so each script runs on the one
shard that holds the namespace, and a cluster scales by spreading namespaces
over its shards.

Clients built here do no retries of their own: `call` decides what may be
repeated after a connection drops (see `threadmill_redis.backend`).
`HeldConnections` is the scripts' fast way to a single server, past the
pool's bookkeeping.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeAlias, TypeVar
from urllib.parse import urlsplit, urlunsplit

import hiredis  # a dependency of the redis extra: redis-py packs with it
import redis
from redis.backoff import NoBackoff
from redis.exceptions import (
    ClusterDownError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    TryAgainError,
)
from redis.retry import Retry

from threadmill_core.errors import InvalidOption
from threadmill_redis.errors import RedisBackendError, RedisUnavailable

log = logging.getLogger("threadmill_redis")

T = TypeVar("T")

#: What the backend talks to: one server, or a cluster.
Client: TypeAlias = redis.Redis | redis.RedisCluster

#: Our URL schemes, and the scheme redis-py is given for each.
SCHEMES = {"redis": "redis", "rediss": "rediss", "unix": "unix", "redis+cluster": "redis"}
CLUSTER_SCHEMES = frozenset({"redis+cluster"})

#: Repeats of a call that may be repeated, after the connection dropped.
REPEATS = 2

#: Driver errors that mean "Redis is not there right now", not "Redis said no":
#: no connection, a dropped one, a timeout, a server still loading its data
#: after a restart (BusyLoadingError is a ConnectionError), a cluster that is
#: down, resharding or has no node for the slot, and a server that cannot
#: take writes (out of memory under noeviction, or a replica after a
#: failover). Those last refusals come before a script has written anything.
UNAVAILABLE: tuple[type[Exception], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    ClusterDownError,
    TryAgainError,
    RedisClusterException,
    OutOfMemoryError,
    ReadOnlyError,
)


def client_from_url(url: str, query: str) -> Client:
    """A client for `url` (one of `SCHEMES`) with `query` (redis-py's options only).

    A cluster client learns the topology when it is built, so it raises
    `RedisUnavailable` when no node answers; a single-server client connects
    on first use.
    """
    parts = urlsplit(url)
    if parts.scheme in CLUSTER_SCHEMES and parts.path.strip("/") not in ("", "0"):
        raise InvalidOption(f"a Redis Cluster has database 0 only, not {parts.path!r}: {url!r}")
    driver_url = urlunsplit(parts._replace(scheme=SCHEMES[parts.scheme], query=query))
    if not parts.netloc:  # urlunsplit writes "unix:/path"; redis-py reads only "unix:///path"
        driver_url = driver_url.replace(":", "://", 1)
    no_retries = Retry(NoBackoff(), 0)
    try:
        if parts.scheme in CLUSTER_SCHEMES:
            return redis.RedisCluster.from_url(driver_url, retry=no_retries)
        return redis.Redis.from_url(driver_url, retry=no_retries)
    except redis.AuthenticationError as exc:  # a ConnectionError, but not an outage
        raise InvalidOption(f"Redis refused the credentials in {url!r}: {exc}") from exc
    except UNAVAILABLE as exc:
        if any(isinstance(e, redis.ResponseError) for e in _chain(exc)):
            # A node answered, and said no: not a cluster, say. Waiting will not help.
            raise InvalidOption(f"Redis refused the connection for {url!r}: {exc}") from exc
        raise RedisUnavailable(f"Redis unavailable at {url!r}: {exc}") from exc
    except redis.RedisError as exc:
        raise InvalidOption(f"Redis refused the connection for {url!r}: {exc}") from exc
    except (ValueError, TypeError) as exc:
        raise InvalidOption(f"invalid Redis URL {url!r}: {exc}") from exc


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and the exceptions it was raised from or while handling, innermost last."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        yield current
        seen.add(id(current))
        current = current.__cause__ or current.__context__


def certificate_refused(exc: BaseException) -> bool:
    """Whether `exc` comes from a server certificate that did not verify (a wrong CA, say)."""
    return any(isinstance(e, ssl.SSLCertVerificationError) for e in _chain(exc))


def socket_timeout(client: Client) -> float | None:
    """The client's socket timeout in seconds, or None for none."""
    if isinstance(client, redis.RedisCluster):
        kwargs: dict[str, Any] = client.nodes_manager.connection_kwargs
    else:
        kwargs = client.connection_pool.connection_kwargs
    value = kwargs.get("socket_timeout")
    return float(value) if value else None


def on_key_node(client: Client, key: str) -> dict[str, Any]:
    """Keyword arguments that send a keyless command to the node holding `key`.

    On a cluster, commands without keys (TIME, CONFIG GET) go to a random
    node unless told otherwise; the namespace's own shard is the one whose
    clock the scripts read.
    """
    if isinstance(client, redis.RedisCluster):
        node = client.get_node_from_key(key)  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
        return {"target_nodes": node}
    return {}


def call(fn: Callable[[], T], *, repeatable: bool, what: str) -> T:
    """Run `fn` against Redis; the one place driver exceptions are translated.

    An outage (see `UNAVAILABLE`) repeats a `repeatable` call twice, after
    50 and 100 ms, then raises `RedisUnavailable`; a call that is not
    repeatable raises it at once. Refused credentials and every other driver
    error raise `RedisBackendError`: they will not go away by waiting.
    """
    for attempt in range(REPEATS + 1):
        try:
            return fn()
        except redis.AuthenticationError as exc:  # a ConnectionError, but not an outage
            raise RedisBackendError(f"Redis refused the credentials ({what}): {exc}") from exc
        except UNAVAILABLE as exc:
            if repeatable and attempt < REPEATS:
                log.debug("%s: Redis unavailable (%s); repeating the call", what, exc)
                time.sleep(0.05 * 2**attempt)
                continue
            raise RedisUnavailable(f"Redis unavailable during {what}: {exc}") from exc
        except redis.RedisError as exc:
            raise RedisBackendError(f"Redis failed during {what}: {exc}") from exc
    raise AssertionError("unreachable")  # pragma: no cover


class HeldConnections:
    """Connections of one `redis.Redis` kept out of its pool, lent for one command at a time.

    redis-py's pool does bookkeeping on every get and release (a fork check,
    a lock, a readiness poll and, in recent versions, metrics attributes)
    that costs more CPU than a small script's round trip. These connections
    are taken from the client's pool once (its connection class, address,
    credentials and TLS; they count toward its ``max_connections``) and
    stay in use there, so closing the client or its pool closes them too;
    but they are lent from a plain list: a caller takes one, sends, reads
    the reply and gives it back, so there are as many as there were
    concurrent calls, and a thread that ends leaves nothing behind.

    - Each connection is checked before it is lent, as the pool checks
      each one it hands out (see `_readable`): one the server closed
      meanwhile (a restart, an idle timeout, CLIENT KILL) is reopened, not
      failed.
    - After any error but the server's error reply, the connection is
      disconnected before it is given back (it is reopened when next lent),
      so a reply left half read is never taken for the next one.
    - A forked child forgets the parent's connections (redis-py closes them
      there without shutting the parent's sockets down) and opens its own.

    Backends on one client share its pool's held connections (`for_client`).
    `for_client` gives None where the pool must stay in charge: a cluster,
    a client or pool of another kind (blocking, sentinel, fakeredis),
    client-side caching or a single-connection client.
    """

    def __init__(self, pool: redis.ConnectionPool) -> None:
        self._pool = pool
        # list.pop and list.append are atomic, so lending needs no lock.
        self._idle: list[Any] = []
        #: Packed heads of `execute_headed`, without their element count.
        self._heads: dict[tuple[Any, ...], bytes] = {}
        #: SHAs of the scripts the server was seen to know (see `evalsha_many_held`).
        #: It may forget them (a restart, SCRIPT FLUSH): NOSCRIPT is still handled.
        self.loaded: set[str] = set()
        _HELD.add(self)

    @classmethod
    def for_client(cls, client: Client) -> HeldConnections | None:
        """The held connections of `client`'s pool, one set per pool, made on first use.

        Shared by every backend on that client, so however many backends
        come and go, the pool gives only as many connections as scripts ran
        at once: they count toward its ``max_connections``.
        """
        if type(client) is not redis.Redis or client.connection is not None:
            return None
        pool = client.connection_pool
        if type(pool) is not redis.ConnectionPool or getattr(pool, "cache", None) is not None:
            return None
        with _BY_POOL_LOCK:
            held: HeldConnections | None = getattr(pool, _ON_POOL, None)
            if held is None:
                held = cls(pool)
                # Kept on the pool itself, so the two live and go together: the
                # connections a pool makes refer to it, so a mapping from pools
                # would keep every pool it ever saw alive.
                setattr(pool, _ON_POOL, held)
        return held

    def _lend(self) -> Any:
        """A connection, checked as the pool checks one: connected, and nothing unread."""
        try:
            conn = self._idle.pop()
        except IndexError:
            conn = self._pool.get_connection()  # in use from now on, as far as the pool knows
        try:
            if getattr(conn, "_sock", None) is None:  # connect() asks too, through its retry
                conn.connect()
            if _readable(conn):
                raise redis.ConnectionError("the connection has unread data")
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            # Closed by the server meanwhile: open it again (failing here is an outage).
            conn.disconnect()
            try:
                conn.connect()
            except BaseException:
                self._idle.append(conn)
                raise
        except BaseException:
            self._idle.append(conn)
            raise
        return conn

    def execute(self, command: Sequence[Any]) -> Any:
        """Send one command and read its reply; an error reply raises (redis-py's exception)."""
        return self._exchange(None, command)

    def execute_headed(self, head: tuple[Any, ...], args: Sequence[Any]) -> Any:
        """`execute` of ``(*head, *args)``, where `head` repeats from call to call.

        A script call's EVALSHA, SHA and keys are the same for every call of
        one script on one queue; packing them is most of the packing of a
        lone enqueue (hiredis formats each argument's length with a
        ``sprintf``). So `head` is packed once and kept, and only `args` are
        packed per call. A connection whose commands redis-py does not pack
        with hiredis (a ``command_packer`` of the caller's) packs the whole
        command as `execute` does.
        """
        return self._exchange(head, args)

    def _exchange(self, head: tuple[Any, ...] | None, args: Sequence[Any]) -> Any:
        """Send ``(*head, *args)`` (`args` alone for no `head`) on a lent connection; its reply."""
        conn = self._lend()
        try:
            if head is None:
                conn.send_command(*args)
            elif type(getattr(conn, "_command_packer", None)) is _HIREDIS_PACKER:
                conn.send_packed_command([self._packed(head, args)])  # one write
            else:
                conn.send_command(*head, *args)
            reply = conn.read_response()
        except redis.ResponseError:
            self._idle.append(conn)  # an error reply, read whole: the connection is in step
            raise
        except BaseException:
            conn.disconnect()
            self._idle.append(conn)
            raise
        self._idle.append(conn)
        return reply

    def _packed(self, head: tuple[Any, ...], args: Sequence[Any]) -> bytes:
        """``(*head, *args)`` packed as hiredis packs it, with `head` packed only the first time."""
        packed = self._heads.get(head)
        if packed is None:
            if len(self._heads) >= _MOST_HEADS:  # bounded, whatever queues come and go
                self._heads.clear()
            packed = self._heads[head] = _without_count(_pack(head))
        body = _without_count(_pack(tuple(args))) if args else b""
        return b"".join((b"*%d\r\n" % (len(head) + len(args)), packed, body))

    def execute_many(
        self, commands: Iterable[Sequence[Any]], *, each: Callable[[int, Any], None] | None = None
    ) -> list[Any]:
        """Pipeline `commands`: send them all, then read every reply, in order.

        Error replies are returned (as redis-py's exceptions), not raised.
        Commands are packed one at a time, as `commands` yields them, and
        sent whenever at least `SEND_CUTOFF` bytes are packed, so the server
        runs the first of a long pipeline while the rest are still being made
        and packed. `each(position, reply)`, if given, is called as each reply
        is read, so the caller's work on one reply overlaps the server's on
        the next.

        A command that cannot be packed (an argument the packer refuses,
        `redis.DataError`) raises after the commands before it may have been
        sent; callers check their arguments first.
        """
        conn = self._lend()
        replies: list[Any] = []
        try:
            pack, send = conn.pack_command, conn.send_packed_command
            packed: list[Any] = []
            size = count = 0
            # Only the first write may check the connection's health: a PING
            # sent after our first commands would have its reply read as theirs.
            first = True
            for command in commands:
                for piece in pack(*command):
                    packed.append(piece)
                    size += len(piece)
                count += 1
                if size >= SEND_CUTOFF:
                    send(_joined(packed), check_health=first)
                    packed, size, first = [], 0, False
            if packed:
                send(_joined(packed), check_health=first)
            for position in range(count):
                try:
                    reply = conn.read_response()
                except redis.ResponseError as exc:
                    reply = exc
                replies.append(reply)
                if each is not None:
                    each(position, reply)
        except BaseException:
            conn.disconnect()
            self._idle.append(conn)
            raise
        self._idle.append(conn)
        return replies

    def close(self) -> None:
        """Disconnect the connections not lent out now and give them back to the pool.

        Lent ones come back to this list as they finish, for a later call.
        """
        while self._idle:
            try:
                conn = self._idle.pop()
            except IndexError:
                break
            conn.disconnect()
            self._pool.release(conn)

    def _forget(self) -> None:
        self._idle = []


def _joined(pieces: list[Any]) -> list[Any]:
    """Packed pieces as one write: a lone piece (hiredis packs a command whole) as it is."""
    return pieces if len(pieces) == 1 else [b"".join(pieces)]


def _pack(arguments: tuple[Any, ...]) -> bytes:
    """A command packed as redis-py packs it with hiredis (str, bytes and numbers only)."""
    try:
        packed: bytes = hiredis.pack_command(arguments)
    except TypeError as exc:  # as redis-py's own packer says it
        raise redis.DataError(str(exc)) from exc
    return packed


def _without_count(packed: bytes) -> bytes:
    """A packed command without its leading element count (``*3\\r\\n``): its arguments alone."""
    return packed[packed.index(b"\r\n") + 2 :]


#: redis-py's packer when hiredis packs (`HeldConnections.execute_headed` packs as it does).
_HIREDIS_PACKER: type | None = getattr(redis.connection, "HiredisRespSerializer", None)
#: Most heads `HeldConnections.execute_headed` keeps.
_MOST_HEADS = 1000
#: Bytes of packed commands `HeldConnections.execute_many` gathers before a write.
SEND_CUTOFF = 64 * 1024
#: The attribute of a connection that holds its socket and that socket's poll object.
_POLLER = "_threadmill_poller"
#: select.poll where the platform has it (not on Windows).
_POLL: Callable[[], Any] | None = getattr(select, "poll", None)


def _readable(conn: Any) -> bool:
    """Whether the server sent `conn` anything unasked: data, an error, or the end of the stream.

    A connection that is lent is in step (every reply read whole, or it was
    disconnected), so anything readable means the server closed it or it
    is out of step. A plain socket is asked with one poll(2). redis-py 7's
    ``can_read`` (with hiredis) makes the socket non-blocking, tries a read
    and makes it blocking again: three system calls, 6.6 µs against 1.6 µs
    on a 2-core VM, and a lone enqueue pays it once (redis-py 8 polls too).
    A TLS socket (whose layer may hold bytes already read) and anything
    unexpected go through ``can_read``. The poll object is made once per
    socket and kept on the connection (a new socket, after a reconnect, gets
    its own): making and registering one costs more than the poll.
    """
    sock = getattr(conn, "_sock", None)
    if type(sock) is socket.socket and _POLL is not None:
        polled = getattr(conn, _POLLER, None)
        if polled is None or polled[0] is not sock:
            poller = _POLL()
            poller.register(sock, select.POLLIN)
            polled = (sock, poller)
            setattr(conn, _POLLER, polled)
        return bool(polled[1].poll(0))
    try:
        return bool(conn.can_read())
    except redis.ConnectionError:  # what can_read says of a connection the server closed
        return True


_HELD: weakref.WeakSet[HeldConnections] = weakref.WeakSet()
#: The attribute of a pool that holds its `HeldConnections` (see `for_client`).
_ON_POOL = "_threadmill_held_connections"
_BY_POOL_LOCK = threading.Lock()


def _forget_held() -> None:
    """In a forked child: the parent's sockets are not ours to use."""
    for held in list(_HELD):
        held._forget()


os.register_at_fork(after_in_child=_forget_held)
