"""The Redis backend's plugin: found through the ``threadmill`` entry point ``redis``."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

from threadmill_core.backend import Backend
from threadmill_core.hookspecs import BackendScheme, hookimpl

_DESCRIPTIONS = {
    "redis": "Redis over TCP, one atomic Lua script per state change",
    "rediss": "Redis over TLS, one atomic Lua script per state change",
    "unix": "Redis over a Unix socket, one atomic Lua script per state change",
    "redis+cluster": "Redis Cluster through any of its nodes; a namespace lives on one shard",
    "redis+sentinel": "Redis Sentinel: the master its sentinels name, followed across failovers",
    "rediss+sentinel": "Redis Sentinel over TLS: the master its sentinels name, over TLS",
}


@hookimpl
def threadmill_backend_schemes() -> list[BackendScheme]:
    # Offered only with the driver installed, so connect() can name the extra instead.
    if importlib.util.find_spec("redis") is None:
        return []
    return [BackendScheme(scheme, text) for scheme, text in _DESCRIPTIONS.items()]


@hookimpl
def threadmill_backend_for_url(url: str, scheme: str, options: Mapping[str, Any]) -> Backend | None:
    if scheme not in _DESCRIPTIONS:
        return None
    from threadmill_redis.backend import RedisBackend

    return RedisBackend.from_url(url, **options)
