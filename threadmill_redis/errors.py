"""Exceptions of the Redis backend; driver errors become these at one boundary."""

from __future__ import annotations

from threadmill_core.errors import BackendUnavailable, ThreadmillError


class RedisBackendError(ThreadmillError):
    """Redis refused or failed a command (the driver's exception is the `__cause__`)."""


class RedisUnavailable(RedisBackendError, BackendUnavailable):
    """Redis could not be reached, or the connection dropped before the reply arrived.

    Also raised while a restarted server is still loading its data, and while
    a cluster is down or resharding. For an operation that is not safe to
    repeat (`cancel`, say), the change may or may not have been applied.
    """


class ScriptIncludeError(RedisBackendError):
    """A Lua script's ``--@include`` lines cannot be resolved.

    `chain` is the include path from the script to the problem, e.g.
    ``("claim", "lib/a", "lib/b", "lib/a")`` for a cycle.
    """

    def __init__(self, chain: tuple[str, ...], problem: str) -> None:
        self.chain = chain
        self.problem = problem
        super().__init__(f"{problem}: {' -> '.join(chain)}")
