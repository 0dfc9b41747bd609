"""What the parts of `RedisBackend` (its mixins) use of it, declared for type checkers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from threadmill_redis import scripts
    from threadmill_redis.clients import Client
    from threadmill_redis.connections import ThreadConnections
    from threadmill_redis.keys import Keys
    from threadmill_redis.options import RedisOptions


class Host:
    """The attributes and helpers `RedisBackend` gives the mixins it is made of."""

    if TYPE_CHECKING:
        keys: Keys
        client: Client
        where: str
        options: RedisOptions
        _ttl_ms: int
        _connections: ThreadConnections | None
        _execute: Callable[..., Any]

        def _run(
            self,
            name: str,
            args: Sequence[Any],
            *,
            repeatable: bool,
            extra_keys: Sequence[str] = (),
            **named_keys: str,
        ) -> Any: ...

        def _script_keys(
            self, script: scripts.Script, named: Any, extra: Sequence[str]
        ) -> list[str]: ...

        def _notify(self, queues: Sequence[str]) -> None: ...
