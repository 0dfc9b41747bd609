"""threadmill's Redis backend: every state change is one atomic Lua script."""

from threadmill_redis.backend import RedisBackend
from threadmill_redis.errors import RedisBackendError, RedisUnavailable, ScriptIncludeError

__all__ = ["RedisBackend", "RedisBackendError", "RedisUnavailable", "ScriptIncludeError"]
