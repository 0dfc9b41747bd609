"""Exceptions of the Redis backend; driver errors become these at one boundary."""

from __future__ import annotations

from threadmill_core.errors import ThreadmillError


class RedisBackendError(ThreadmillError):
    """Redis refused or failed a command (the driver's exception is the `__cause__`)."""


class RedisUnavailable(RedisBackendError, ConnectionError):
    """Redis could not be reached, or the connection dropped before the reply arrived.

    For an operation that is not safe to repeat (a claim, say), the change may
    or may not have been applied.
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
