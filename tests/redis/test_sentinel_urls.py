"""How a Sentinel URL becomes a client: which credentials and TLS settings go where.

No server is needed: a Sentinel client connects on first use, so what it
was told is read from redis-py's pools (their public settings).
"""

from __future__ import annotations

import redis
from redis.sentinel import SentinelConnectionPool

from threadmill_redis import clients

QUERY = "ssl_ca_certs=%2Fca.crt&socket_timeout=2&sentinel_username=watch&sentinel_password=s3"


def sentinel_pool(client: redis.Redis) -> SentinelConnectionPool:
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    return pool


def test_the_url_credentials_are_the_masters_and_the_query_ones_the_sentinels() -> None:
    """user:password@ goes to the master's connections, sentinel_username/_password to the
    sentinels'; TLS and socket options to both; a sentinel without a port gets 26379."""
    url = f"rediss+sentinel://app:m3@[::1],10.0.0.6:26380/jobs%20master/3?{QUERY}"
    client = clients.client_from_url(url, QUERY)
    pool = sentinel_pool(client)
    assert issubclass(pool.connection_class, redis.SSLConnection)
    master = pool.connection_kwargs
    assert (master["username"], master["password"], master["db"]) == ("app", "m3", 3)
    assert (master["ssl_ca_certs"], master["socket_timeout"]) == ("/ca.crt", 2.0)
    assert pool.service_name == "jobs master"
    found = []
    for sentinel in pool.sentinel_manager.sentinels:
        kwargs = sentinel.connection_pool.connection_kwargs
        assert issubclass(sentinel.connection_pool.connection_class, redis.SSLConnection)
        assert (kwargs["username"], kwargs["password"]) == ("watch", "s3")
        assert (kwargs["ssl_ca_certs"], kwargs["socket_timeout"]) == ("/ca.crt", 2.0)
        found.append((kwargs["host"], kwargs["port"]))
    assert found == [("::1", 26379), ("10.0.0.6", 26380)]
    assert (
        clients.location(client) == "rediss+sentinel://[::1]:26379,10.0.0.6:26380/jobs%20master/3"
    )
    client.close()


def test_without_tls_or_sentinel_credentials_the_sentinels_get_none() -> None:
    """redis+sentinel:// speaks plain TCP, and asks the sentinels without credentials."""
    client = clients.client_from_url("redis+sentinel://:m3@127.0.0.1:26379/jobs", "")
    pool = sentinel_pool(client)
    assert not issubclass(pool.connection_class, redis.SSLConnection)
    assert (pool.connection_kwargs["password"], pool.connection_kwargs["db"]) == ("m3", 0)
    [sentinel] = pool.sentinel_manager.sentinels
    assert sentinel.connection_pool.connection_kwargs.get("password") is None
    client.close()
