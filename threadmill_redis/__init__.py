"""threadmill's Redis backend: every state change is one atomic Lua script.

`RedisBackend` is imported on first use, so the package (and the plugin the
``threadmill`` entry point loads) imports without redis-py installed; the
plugin then offers no schemes and `connect` names the extra to install.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from threadmill_redis.errors import RedisBackendError, RedisUnavailable, ScriptIncludeError

if TYPE_CHECKING:
    from threadmill_redis.backend import RedisBackend

__all__ = ["RedisBackend", "RedisBackendError", "RedisUnavailable", "ScriptIncludeError"]


def __getattr__(name: str) -> Any:
    if name == "RedisBackend":
        from threadmill_redis.backend import RedisBackend

        return RedisBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
