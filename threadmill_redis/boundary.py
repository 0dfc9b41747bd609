"""The driver boundary: every call on redis-py goes through `call`, where its errors become ours.

`call` runs a function of the client (a command, a script, a pipeline) and
lets no exception of the driver through: an outage becomes `RedisUnavailable`
(the core's `BackendUnavailable`, which workers ride out with a backoff),
anything else `RedisBackendError`, the driver's exception its `__cause__`.
That includes exceptions redis-py does not mean to raise, such as a
`TypeError` from a version whose API differs: a broken driver is a failed
call, never an exception from deep inside it. A call that may be repeated
is repeated here after a dropped connection, and nowhere else: the clients
the backend builds do no retries of their own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

import redis
from redis.exceptions import (
    ClusterDownError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    TryAgainError,
)

from threadmill_redis.errors import RedisBackendError, RedisUnavailable

log = logging.getLogger("threadmill_redis")

T = TypeVar("T")

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


def call(fn: Callable[[], T], *, repeatable: bool, what: str, where: str | None = None) -> T:
    """Run `fn` (calls on a redis-py client, nothing else); the one place its errors become ours.

    An outage (see `UNAVAILABLE`) repeats a `repeatable` call twice, after
    50 and 100 ms, then raises `RedisUnavailable`; a call that is not
    repeatable raises it at once. Refused credentials and every other
    exception raise `RedisBackendError`: they will not go away by waiting.
    `what` names the call in the message, `where` the server (a URL without
    credentials, see `clients.location`), as in "Redis unavailable at
    redis://10.0.0.5:6379/0 (connection refused) during claim".
    """
    for attempt in range(REPEATS + 1):
        try:
            return fn()
        except redis.AuthenticationError as exc:  # a ConnectionError, but not an outage
            raise RedisBackendError(f"Redis refused the credentials ({what}): {exc}") from exc
        except (redis.RedisError, RedisClusterException) as exc:  # UNAVAILABLE's, and others
            if not unavailable(exc):
                raise RedisBackendError(f"Redis failed during {what}: {exc}") from exc
            if repeatable and attempt < REPEATS:
                log.debug("%s: Redis unavailable (%s); repeating the call", what, exc)
                time.sleep(0.05 * 2**attempt)
                continue
            at = f" at {where}" if where else ""
            if isinstance(exc, OutOfMemoryError):
                raise RedisUnavailable(
                    f"Redis{at} is out of memory (used memory over maxmemory; it refuses "
                    f"writes that would grow it) during {what}: the refused write changed "
                    "nothing, and writes work again once memory is freed"
                ) from exc
            raise RedisUnavailable(f"Redis unavailable{at} ({_reason(exc)}) during {what}") from exc
        except Exception as exc:  # the driver broke (see the module docstring)
            raise RedisBackendError(
                f"the Redis driver failed during {what}: {type(exc).__name__}: {exc}"
            ) from exc
    raise AssertionError("unreachable")  # pragma: no cover


#: How a master that is turned into a replica (a failover, REPLICAOF) answers the clients
#: blocked on it (BLPOP) before it closes their connections. redis-py 8 and later
#: raise it as a ConnectionError on a Sentinel client; earlier versions, and every
#: other client, as an error reply.
DEMOTED = "UNBLOCKED force unblock from blocking operation, instance state changed"


#: How a master with ``min-replicas-to-write`` refuses a write while too few replicas are in
#: sync (one cut off from its replicas, say): before the script wrote anything.
NO_REPLICAS = "NOREPLICAS"


def unavailable(exc: Exception) -> bool:
    """Whether `exc` means "Redis is not there now": `UNAVAILABLE`, `DEMOTED`, `NO_REPLICAS`."""
    if isinstance(exc, UNAVAILABLE):
        return True
    return isinstance(exc, redis.ResponseError) and str(exc).startswith((DEMOTED, NO_REPLICAS))


def _reason(exc: BaseException) -> str:
    """Why a call found Redis unavailable, briefly: the operating system's words for a
    socket error beneath the driver's ("connection refused"), else the driver's message."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.strerror:
            return current.strerror[:1].lower() + current.strerror[1:]
        current = current.__cause__ or current.__context__
    return str(exc) or type(exc).__name__
