"""Exceptions of the Redis backend; driver errors become these at one boundary."""

from __future__ import annotations

from collections.abc import Sequence

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


class PartlyEnqueued(RedisBackendError):
    """A batch sent in several scripts (``enqueue_batch`` tasks each) stopped part way.

    Each script is atomic, so every task is either stored or not: `stored`
    holds the ids of those stored, `not_stored` the others, both in the
    order given, and `not_stored_indexes` the positions of the others in the
    batch (the records, or `Broker.enqueue_many`'s calls). Ids are fixed
    before anything is sent and enqueue is idempotent on id, so resending
    the same records stores nothing twice; `enqueue_many`, which makes new
    ids each time, resends just the calls at `not_stored_indexes`. The error
    that stopped the batch is the `__cause__`. When Redis was unavailable
    (out of memory, say), the exception is also a `RedisUnavailable`
    (`PartlyEnqueuedUnavailable`).
    """

    def __init__(
        self,
        message: str,
        stored: Sequence[str],
        not_stored: Sequence[str],
        not_stored_indexes: Sequence[int],
    ) -> None:
        super().__init__(message)
        self.stored = tuple(stored)
        self.not_stored = tuple(not_stored)
        self.not_stored_indexes = tuple(not_stored_indexes)


class PartlyEnqueuedUnavailable(PartlyEnqueued, RedisUnavailable):
    """`PartlyEnqueued`, stopped because Redis was unavailable: an outage, as for any call."""
