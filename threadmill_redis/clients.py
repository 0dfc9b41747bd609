"""Redis clients: built from our URLs, and what the backend reads of their settings.

Schemes: ``redis://`` and ``rediss://`` (TLS) and ``unix://`` reach one
server; ``redis+cluster://host:port`` reaches a Redis Cluster through any of
its nodes, with redis-py's cluster client; ``redis+sentinel://`` and
``rediss+sentinel://`` reach the master that Redis Sentinel names (see
`threadmill_redis.sentinel`), with redis-py's Sentinel client. Every key of a namespace shares
one hash tag (see `threadmill_redis.keys`), so each script runs on the one
shard that holds the namespace, and a cluster scales by spreading namespaces
over its shards.

Clients built here do no retries of their own: `threadmill_redis.boundary`
decides what may be repeated after a connection drops. Building one is the
only place that turns driver errors into `InvalidOption` (a URL or
credentials that cannot work); every call on a client goes through
`threadmill_redis.boundary.call`. `check_server` is what a backend asks of
a client as it is built.
"""

from __future__ import annotations

import inspect
import logging
import ssl
from collections.abc import Iterator, Mapping
from typing import Any, TypeAlias
from urllib.parse import parse_qs, urlsplit, urlunsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from threadmill_core.errors import InvalidOption
from threadmill_core.urls import redact
from threadmill_redis.boundary import UNAVAILABLE, call
from threadmill_redis.errors import RedisBackendError, RedisUnavailable
from threadmill_redis.keys import Keys
from threadmill_redis.sentinel import (
    check_sentinels,
    is_sentinel_url,
    sentinel_client,
    sentinel_location,
)

log = logging.getLogger("threadmill_redis")

#: What the backend talks to: one server, or a cluster.
Client: TypeAlias = redis.Redis | redis.RedisCluster

#: Our URL schemes, and the scheme redis-py is given for each.
SCHEMES = {
    "redis": "redis",
    "rediss": "rediss",
    "unix": "unix",
    "redis+cluster": "redis",
    "redis+sentinel": "redis",
    "rediss+sentinel": "rediss",
}
CLUSTER_SCHEMES = frozenset({"redis+cluster"})


def client_from_url(url: str, query: str) -> Client:
    """A client for `url` (one of `SCHEMES`) with `query` (redis-py's options only).

    A cluster client learns the topology when it is built, so it raises
    `RedisUnavailable` when no node answers; a single-server client connects
    on first use, as does a Sentinel client (`threadmill_redis.sentinel`).
    """
    no_retries = Retry(NoBackoff(), 0)
    protocol = parse_qs(query).get("protocol", [None])[-1]
    if is_sentinel_url(url):
        return sentinel_client(
            url, query, lambda: {"retry": no_retries, **_driver_options(redis.Redis, protocol)}
        )
    parts = urlsplit(url)
    check_database(parts.scheme, parts.path, url)
    driver_url = urlunsplit(parts._replace(scheme=SCHEMES[parts.scheme], query=query))
    if not parts.netloc:  # urlunsplit writes "unix:/path"; redis-py reads only "unix:///path"
        driver_url = driver_url.replace(":", "://", 1)
    try:
        if parts.scheme in CLUSTER_SCHEMES:
            return redis.RedisCluster.from_url(
                driver_url, retry=no_retries, **_driver_options(redis.RedisCluster, protocol)
            )
        return redis.Redis.from_url(
            driver_url, retry=no_retries, **_driver_options(redis.Redis, protocol)
        )
    except redis.AuthenticationError as exc:  # a ConnectionError, but not an outage
        raise InvalidOption(f"Redis refused the credentials in {redact(url)!r}: {exc}") from exc
    except UNAVAILABLE as exc:
        if _refused(exc):
            # A node answered, and said no: not a cluster, say. Waiting will not help.
            raise InvalidOption(f"Redis refused the connection for {redact(url)!r}: {exc}") from exc
        raise RedisUnavailable(f"Redis unavailable at {redact(url)!r}: {exc}") from exc
    except redis.RedisError as exc:
        raise InvalidOption(f"Redis refused the connection for {redact(url)!r}: {exc}") from exc
    except (ValueError, TypeError) as exc:
        raise InvalidOption(f"invalid Redis URL {redact(url)!r}: {exc}") from exc


def check_database(scheme: str, path: str, url: str) -> None:
    """`InvalidOption` unless the URL's `path` names a database as a whole number, or none.

    redis-py reads ``redis://host/abc`` (or ``/0/x``) as database 0 without
    a word, so a typo would quietly use another database: the path must be
    empty or one number (a ``unix://`` URL's path is its socket, and its
    database is the ``db`` query parameter, which redis-py checks itself).
    A Redis Cluster has database 0 only.
    """
    if scheme == "unix":
        return
    database = path.removeprefix("/")
    if database and not (database.isascii() and database.isdigit()):
        raise InvalidOption(
            f"the Redis database in {redact(url)!r} must be a whole number such as 0, "
            f"got {database!r}"
        )
    if scheme in CLUSTER_SCHEMES and int(database or 0) != 0:
        raise InvalidOption(f"a Redis Cluster has database 0 only, not {database}: {redact(url)!r}")


def _driver_options(kind: type[Client], protocol: str | None) -> dict[str, Any]:
    """Keywords for a client of `kind` speaking RESP `protocol` (None: the driver's default):
    no maintenance notifications, and the driver's version.

    See `_no_maintenance_notifications`. redis-py 7 and later also look up
    their own version in the installed packages' metadata for each new
    connection, unless told it (``driver_info``, which it sends to the
    server with CLIENT SETINFO): a scan of every installed distribution and
    a parse of redis-py's METADATA per connection. `redis.__version__` is
    the same answer. Versions before 7 read it once, at import.
    """
    parameters = inspect.signature(kind.__init__).parameters
    options = _no_maintenance_notifications(kind, parameters, protocol)
    if "driver_info" in parameters:
        from redis.driver_info import DriverInfo

        options["driver_info"] = DriverInfo(lib_version=redis.__version__)
    return options


def _no_maintenance_notifications(
    kind: type[Client], parameters: Mapping[str, object], protocol: str | None
) -> dict[str, Any]:
    """The keyword that tells a client of `kind` not to ask for maintenance notifications,
    if its constructor's `parameters` take one and it would ask.

    redis-py 7 and later ask every new connection's server for them
    (``CLIENT MAINT_NOTIFICATIONS``, a Redis Enterprise feature), and log a
    failure per connection at DEBUG on servers that lack it. Their answer is
    a relaxed timeout or a reconnect that the driver does on its own, while
    this backend decides what is repeated (`threadmill_redis.boundary`):
    so we do not ask. Versions before 7 have no such option, and do not ask;
    their clients get nothing here.
    """
    try:
        from redis.maint_notifications import MaintNotificationsConfig
        from redis.utils import check_protocol_version
    except ImportError:  # redis-py < 7
        return {}
    if "maint_notifications_config" not in parameters:
        return {}  # a cluster client of redis-py 7.0 and 7.1
    if kind is redis.RedisCluster and not check_protocol_version(protocol, 3):
        # A cluster client asks only over RESP3; over RESP2 (redis-py 7's default),
        # redis-py 7.4 refuses the option itself there, even to say no.
        return {}
    return {"maint_notifications_config": MaintNotificationsConfig(enabled=False)}


def location(client: Client) -> str:
    """Where `client` connects, as a URL without credentials: for messages and logs."""
    if isinstance(client, redis.RedisCluster):
        node = client.get_default_node()  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
        return (
            f"redis+cluster://{node.host}:{node.port}" if node is not None else "redis+cluster://"
        )
    sentinel = sentinel_location(client)
    if sentinel is not None:
        return sentinel
    pool = client.connection_pool
    kwargs = pool.connection_kwargs
    db = kwargs.get("db", 0)
    if kwargs.get("path"):
        return f"unix://{kwargs['path']}?db={db}"
    scheme = "rediss" if issubclass(pool.connection_class, redis.SSLConnection) else "redis"
    host = kwargs.get("host", "localhost")
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}:{kwargs.get('port', 6379)}/{db}"


def _refused(exc: BaseException) -> bool:
    """Whether a node answered and said no (it is not in cluster mode, say), or none answered.

    redis-py words a refusal as an error reply in the chain, or (5.0) as a
    cluster exception of its own beneath the outer one; an outage ends the
    chain in a connection error or a timeout.
    """
    chain = list(_chain(exc))
    if any(isinstance(e, redis.ResponseError) for e in chain):
        return True
    return len(chain) > 1 and not isinstance(
        chain[-1], redis.ConnectionError | redis.TimeoutError | OSError
    )


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


#: The socket timeout of a connection not told one: none before redis-py 8, 5 s since.
DEFAULT_SOCKET_TIMEOUT = (
    inspect.signature(redis.connection.AbstractConnection.__init__)
    .parameters["socket_timeout"]
    .default
)


def socket_timeout(client: Client) -> float | None:
    """The client's socket timeout in seconds, or None for none.

    A client built from a URL without ``socket_timeout`` leaves it out of
    its connection settings, and its connections take redis-py's default.
    """
    if isinstance(client, redis.RedisCluster):
        kwargs: dict[str, Any] = client.nodes_manager.connection_kwargs
    else:
        kwargs = client.connection_pool.connection_kwargs
    value = kwargs.get("socket_timeout", DEFAULT_SOCKET_TIMEOUT)
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


def check_server(client: Client, keys: Keys, where: str | None = None) -> None:
    """Check a backend's `client` once, as it is built, for the namespace of `keys`.

    Raises `InvalidOption` for what cannot work; warns unless ``noeviction``.

    Refused credentials, a server certificate that does not verify, a
    database the server does not have (``redis://host/99`` on a server of
    16), a master name no sentinel knows or sentinel credentials they all
    refuse (`threadmill_redis.sentinel.check_sentinels`) and a Redis user
    that may not use this namespace's keys will not go away by waiting, so
    they fail here. A server that cannot be reached now is not an error:
    workers start during an outage too, and ride it out.
    """
    if isinstance(client, redis.Redis):
        check_sentinels(client)  # a master name or sentinel credentials that cannot work
    state = keys.store("state")
    try:
        # One read of a namespace key settles credentials, certificate and key permissions.
        call(lambda: client.exists(state), repeatable=False, what="connect", where=where)
    except RedisUnavailable as exc:
        if certificate_refused(exc):
            raise InvalidOption(f"Redis's TLS certificate does not verify: {exc}") from exc
        log.debug("Redis is not reachable now (%s); calls will wait for it", exc)
        return
    except RedisBackendError as exc:
        if isinstance(exc.__cause__, redis.AuthenticationError):
            raise InvalidOption(f"Redis refused the credentials: {exc.__cause__}") from exc
        if isinstance(exc.__cause__, redis.ResponseError) and "DB index" in str(exc.__cause__):
            raise InvalidOption(
                f"Redis has no such database ({where or 'the client'}): {exc.__cause__}"
            ) from exc
        if isinstance(exc.__cause__, redis.exceptions.NoPermissionError):
            raise InvalidOption(
                f"the Redis user may not use the keys of namespace {keys.namespace!r} "
                f"({keys.prefix}*): {exc.__cause__}"
            ) from exc
        log.debug("Redis could not be checked now (%s); calls will tell", exc)
        return
    _warn_about_eviction(client, keys, where)


def _warn_about_eviction(client: Client, keys: Keys, where: str | None) -> None:
    here = on_key_node(client, keys.store("state"))
    try:
        reply = call(
            lambda: client.config_get("maxmemory-policy", **here),
            repeatable=False,
            what="config",
            where=where,
        )
    except RedisBackendError as exc:
        # CONFIG may be disabled (managed Redis, an ACL user without it, fakeredis).
        log.debug("could not read maxmemory-policy: %s", exc)
        return
    policy = reply.get("maxmemory-policy")
    if policy not in (None, "noeviction", b"noeviction"):
        log.warning(
            "Redis maxmemory-policy is %r, not 'noeviction': when memory runs out Redis "
            "may evict threadmill's keys (task records, leases, whole queues), losing "
            "tasks silently; set maxmemory-policy to noeviction so writes fail loudly instead",
            policy.decode() if isinstance(policy, bytes) else policy,
        )
