"""Building a RedisBackend: URL schemes through the plugin, options, and their errors."""

from __future__ import annotations

import logging
from datetime import timedelta

import fakeredis
import pytest
import redis

from tests.conftest import RedisServer
from threadmill_core.errors import InvalidOption
from threadmill_core.plugins import backend_for_url, installed_backends
from threadmill_redis import RedisBackend
from threadmill_redis.options import RedisOptions


def test_the_plugin_offers_the_three_redis_schemes() -> None:
    """redis://, rediss:// and unix:// are installed schemes, served by the redis plugin."""
    schemes = {b.scheme: b.plugin for b in installed_backends()}
    assert {schemes[s] for s in ("redis", "rediss", "unix")} == {"redis"}


def test_options_come_from_the_url_query_and_keywords() -> None:
    """Query values (seconds, whole numbers) and keywords both set options."""
    backend = backend_for_url(
        "redis://localhost/0?namespace=jobs&result_ttl=90&prune_batch=7",
        {"client": fakeredis.FakeRedis(), "lease_ttl": timedelta(minutes=2)},
    )
    assert isinstance(backend, RedisBackend)
    assert backend.options == RedisOptions(
        namespace="jobs",
        result_ttl=timedelta(seconds=90),
        prune_batch=7,
        lease_ttl=timedelta(minutes=2),
    )
    assert backend.keys.store("state") == "{jobs}:state"


@pytest.mark.redis
def test_a_url_connects_and_driver_query_options_reach_redis_py(redis_server: RedisServer) -> None:
    """A URL builds its own client, passing redis-py options on; close() closes that client."""
    backend = RedisBackend.from_url(f"{redis_server.url}?socket_timeout=7&namespace=u")
    try:
        assert backend.client.connection_pool.connection_kwargs["socket_timeout"] == 7.0
        assert backend.now().year >= 2024
    finally:
        backend.close()


@pytest.mark.parametrize(
    ("url", "options", "message"),
    [
        ("redis://h/0?colour=blue", {}, "unknown option 'colour'"),
        ("redis://h/0", {"colour": "blue"}, "unknown Redis backend option"),
        ("redis://h/0?result_ttl=soon", {}, "result_ttl must be a number of seconds"),
        ("redis://h/0?result_ttl=-5", {}, "result_ttl must be positive"),
        ("redis://h/0", {"lease_ttl": timedelta(0)}, "lease_ttl must be positive"),
        ("redis://h/0?result_ttl=nan", {}, "result_ttl must be a finite number of seconds"),
        ("redis://h/0?claim_ttl=inf", {}, "claim_ttl must be a finite number of seconds"),
        ("redis://h/0?result_ttl=1e300", {}, "result_ttl is out of range"),
        ("redis://h/0?prune_batch=0", {}, "prune_batch must be an int of at least 1"),
        ("redis://h/0?purge_batch=1.5", {}, "purge_batch must be a whole number"),
        ("redis://h/0", {"enqueue_batch": True}, "enqueue_batch must be an int"),
        ("redis://h/0?namespace=a{b}", {}, "namespace must be a non-empty str without braces"),
        ("redis://h/0?namespace=", {}, "namespace must be a non-empty str"),
        ("redis://h/0?namespace=a&namespace=b", {}, "'namespace' is given twice"),
        ("redis://h/0?namespace=a", {"namespace": "b"}, "'namespace' is given twice"),
        ("redis://h/0", {"client": "localhost"}, "client must be a redis.Redis"),
        ("redis://h/0?socket_timeout=soon", {}, "invalid Redis URL"),
        ("http://h/0", {}, "not a Redis URL"),
    ],
)
def test_bad_options_are_refused_with_a_clear_error(
    url: str, options: dict[str, object], message: str
) -> None:
    """Unknown or malformed options raise InvalidOption naming the option."""
    with pytest.raises(InvalidOption, match=message):
        RedisBackend.from_url(url, **options)


def test_a_client_that_decodes_responses_is_refused() -> None:
    """Payloads are bytes, so a client with decode_responses=True is an InvalidOption."""
    with pytest.raises(InvalidOption, match="decode"):
        RedisBackend(fakeredis.FakeRedis(decode_responses=True))


@pytest.mark.redis
@pytest.mark.parametrize(("policy", "warned"), [("allkeys-lru", True), ("noeviction", False)])
def test_an_evicting_server_is_warned_about(
    policy: str, warned: bool, real_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Connecting to a server whose maxmemory-policy is not noeviction logs why that loses tasks."""
    real_client.config_set("maxmemory-policy", policy)
    try:
        with caplog.at_level(logging.WARNING, logger="threadmill_redis"):
            RedisBackend(real_client, namespace="evict")
    finally:
        real_client.config_set("maxmemory-policy", "noeviction")
    messages = [r.getMessage() for r in caplog.records if r.name == "threadmill_redis"]
    if warned:
        assert len(messages) == 1
        assert "allkeys-lru" in messages[0]
        assert "evict" in messages[0]
        assert "noeviction" in messages[0]
    else:
        assert messages == []
