"""Redis Sentinel: a client that finds the master through sentinels, from a URL.

``redis+sentinel://[user:password@]host1:26379,host2:26379/MASTER[/DB][?options]``
reaches the master that the sentinels at ``host1``, ``host2``, ... monitor
under the name ``MASTER``; ``rediss+sentinel://`` speaks TLS to the master
and to the sentinels alike. This is the grammar of Prefect's and docket's
Sentinel URLs (and of the older Redis-Sentinel-Url package):

- a sentinel without a port listens on 26379; ``DB`` defaults to 0;
- the user name and password in the URL are the master's (and its
  replicas'), as in a ``redis://`` URL;
- the ``sentinel_username`` and ``sentinel_password`` query options are the
  sentinels' own (``requirepass`` in sentinel.conf); without them the
  sentinels are asked without credentials;
- the other query options are redis-py's connection options, as for
  ``redis://`` (``socket_timeout``, ``ssl_ca_certs``, ...); the ``socket_*``
  and ``ssl_*`` ones apply to the sentinel connections too, so one CA covers
  the whole deployment.

The client is redis-py's own (`redis.sentinel.Sentinel.master_for`): each
new connection asks the sentinels where the master is, and a connection to a
master that was demoted fails as a connection error, so every call after a
failover, blocking waits included, reconnects to the new master once the
backend's outage handling repeats it (`threadmill_redis.boundary`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

import redis
from redis.connection import SSLConnection, parse_url
from redis.sentinel import Sentinel, SentinelConnectionPool

from threadmill_core.errors import InvalidOption
from threadmill_core.urls import redact

#: Our Sentinel schemes: TLS or not.
SENTINEL_SCHEMES = frozenset({"redis+sentinel", "rediss+sentinel"})

#: The sentinels' own credentials, as query options of a Sentinel URL.
SENTINEL_QUERY_OPTIONS = frozenset({"sentinel_username", "sentinel_password"})

#: Where a sentinel listens unless the URL says otherwise.
DEFAULT_PORT = 26379

#: The shape of a Sentinel URL, for error messages.
SHAPE = "redis+sentinel://[user:password@]host1:26379,host2:26379/MASTER[/DB]"


def is_sentinel_url(url: str) -> bool:
    """Whether `url` names one of `SENTINEL_SCHEMES` (told by its scheme alone)."""
    return url.partition("://")[0].lower() in SENTINEL_SCHEMES


def sentinel_client(url: str, query: str, common: Callable[[], dict[str, Any]]) -> redis.Redis:
    """A client of the master that `url`'s sentinels monitor.

    `query` holds redis-py's connection options and `SENTINEL_QUERY_OPTIONS`
    only (see `threadmill_redis.options.split_query`); `common()` gives the
    keywords every client, the master's and the sentinels', gets (no retries
    inside redis-py, ...). No connection is made here: the first call asks
    the sentinels. A URL that cannot work is an `InvalidOption` naming what
    is wrong in it.
    """
    scheme, _, rest = url.partition("://")
    rest = rest.partition("?")[0].partition("#")[0]  # the query comes as `query`
    tls = scheme.lower() == "rediss+sentinel"
    address, _, path = rest.partition("/")
    userinfo, at, hosts = address.rpartition("@")
    sentinels = _sentinels(hosts, url)
    master, db = _master_and_db(path, url)
    pairs = parse_qsl(query, keep_blank_values=True)
    sentinel_options = {name: value for name, value in pairs if name in SENTINEL_QUERY_OPTIONS}
    query = urlencode([(name, value) for name, value in pairs if name not in sentinel_options])
    # redis-py's own parser reads the credentials and the connection options,
    # exactly as for a redis:// URL; the host is a placeholder it never uses.
    driver_url = f"{'rediss' if tls else 'redis'}://{userinfo}{at}sentinel/{db}"
    try:
        kwargs = parse_url(f"{driver_url}?{query}" if query else driver_url)  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
    except ValueError as exc:
        raise InvalidOption(f"invalid Redis Sentinel URL {redact(url)!r}: {exc}") from None
    kwargs.pop("host", None)
    kwargs.pop("port", None)
    if kwargs.pop("connection_class", None) is SSLConnection:
        kwargs["ssl"] = True
    shared = {
        name: value
        for name, value in kwargs.items()
        if name.startswith(("socket_", "ssl")) and name != "socket_keepalive_options"
    }
    for name in SENTINEL_QUERY_OPTIONS:
        if name in sentinel_options:
            shared[name.removeprefix("sentinel_")] = sentinel_options[name]
    options = common()
    try:
        manager = Sentinel(sentinels, sentinel_kwargs={**shared, **options}, **kwargs)
        client: redis.Redis = manager.master_for(master, **options)
        return client
    except (ValueError, TypeError) as exc:
        raise InvalidOption(f"invalid Redis Sentinel URL {redact(url)!r}: {exc}") from None


def _sentinels(hosts: str, url: str) -> list[tuple[str, int]]:
    """The ``host:port`` pairs of a Sentinel URL, at least one; port 26379 if not given."""
    if not hosts:
        raise InvalidOption(
            f"a Redis Sentinel URL names at least one sentinel as host:port ({SHAPE}); "
            f"none in {redact(url)!r}"
        )
    found: list[tuple[str, int]] = []
    for member in hosts.split(","):
        if not member:
            raise InvalidOption(
                f"a Redis Sentinel URL names its sentinels as host:port, separated by commas "
                f"({SHAPE}); found an empty one in {redact(url)!r}"
            )
        try:
            parts = urlsplit(f"//{member}")
            host, port = parts.hostname, parts.port
        except ValueError:  # a port that is not a number from 0 to 65535
            host = port = None
        if not host:
            raise InvalidOption(
                f"the sentinel {member!r} in {redact(url)!r} is not a host:port with a port "
                f"from 0 to 65535"
            )
        found.append((unquote(host), port if port is not None else DEFAULT_PORT))
    return found


def _master_and_db(path: str, url: str) -> tuple[str, int]:
    """The master's name and the database number from a Sentinel URL's path."""
    name, _, db = path.partition("/")
    name = unquote(name)
    if not name:
        raise InvalidOption(
            f"a Redis Sentinel URL names the master its sentinels monitor ({SHAPE}); "
            f"none in {redact(url)!r}"
        )
    db = db.removesuffix("/")
    if db and not (db.isascii() and db.isdigit()):
        raise InvalidOption(
            f"the Redis database in {redact(url)!r} must be a whole number such as 0, got {db!r}"
        )
    return name, int(db or 0)


def check_sentinels(client: redis.Redis) -> None:
    """Ask a Sentinel client's sentinels for its master once, as a backend is built.

    `InvalidOption` when none of them can help and waiting will not change
    that: every sentinel that answered knows no master by the URL's name (a
    typo), or every one refused the sentinel credentials. Sentinels that
    cannot be reached are an outage, which workers wait out: nothing is
    raised for them. Does nothing for another client.
    """
    pool = client.connection_pool
    if not isinstance(pool, SentinelConnectionPool):
        return
    answered = refused = 0
    for sentinel in pool.sentinel_manager.sentinels:
        try:
            address = sentinel.sentinel_get_master_addr_by_name(pool.service_name)
        except redis.AuthenticationError:
            refused += 1
            continue
        except (redis.ConnectionError, redis.TimeoutError):
            continue
        except redis.ResponseError as exc:
            if "NOAUTH" in str(exc) or "WRONGPASS" in str(exc):
                refused += 1
            continue
        if address:
            return
        answered += 1
    where = sentinel_location(client)
    if refused and not answered:
        raise InvalidOption(
            f"the sentinels refused the credentials (sentinel_username, sentinel_password) "
            f"given in {where!r}"
        )
    if answered:
        raise InvalidOption(
            f"the sentinels of {where!r} monitor no master named {pool.service_name!r}"
        )


def sentinel_location(client: redis.Redis) -> str | None:
    """Where a Sentinel client connects, as a URL without credentials; None for another client."""
    pool = client.connection_pool
    if not isinstance(pool, SentinelConnectionPool):
        return None
    sentinels = []
    for sentinel in pool.sentinel_manager.sentinels:
        kwargs = sentinel.connection_pool.connection_kwargs
        host, port = kwargs.get("host", "localhost"), kwargs.get("port", DEFAULT_PORT)
        sentinels.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    tls = issubclass(pool.connection_class, SSLConnection)
    scheme = "rediss+sentinel" if tls else "redis+sentinel"
    db = pool.connection_kwargs.get("db", 0)
    return f"{scheme}://{','.join(sentinels)}/{quote(pool.service_name, safe='')}/{db}"
