"""The Redis backend's schedule state (`Backend.set_schedule_paused`), a mixin of its own.

One hash per namespace, ``{ns}:schedules`` (see `threadmill_redis.keys`): a
schedule's name -> ``"<1|0>|<since ms>"``. The write is one script
(``set_schedule_paused.lua``, which reads the server's clock); the read is
one HGETALL.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from threadmill_core.backend import SchedulePause, check_schedule_name
from threadmill_core.clock import from_ms
from threadmill_redis.boundary import call

if TYPE_CHECKING:
    from threadmill_redis.keys import Keys


class RedisPauses:
    """`set_schedule_paused` and `schedule_pauses` for `RedisBackend`, which mixes this in."""

    if TYPE_CHECKING:
        keys: Keys
        client: Any
        where: str

        def _run(
            self,
            name: str,
            args: Sequence[Any],
            *,
            repeatable: bool,
            extra_keys: Sequence[str] = (),
            **named_keys: str,
        ) -> Any: ...

    def set_schedule_paused(self, name: str, paused: bool) -> SchedulePause:
        check_schedule_name(name)
        flag = "1" if paused else "0"
        reply = self._run(
            "set_schedule_paused",
            [name, flag],
            repeatable=True,  # a repeat finds its own write and changes nothing
            schedules=self.keys.store("schedules"),
        )
        return _pause(reply)

    def schedule_pauses(self) -> dict[str, SchedulePause]:
        key = self.keys.store("schedules")
        found = call(  # a command with a key: a cluster client routes it by the key
            lambda: self.client.hgetall(key),
            repeatable=True,
            what="the schedules' pauses (HGETALL)",
            where=self.where,
        )
        return {_text(name): _pause(value) for name, value in found.items()}


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _pause(value: bytes | str) -> SchedulePause:
    flag, _, ms = _text(value).partition("|")
    return SchedulePause(flag == "1", from_ms(int(ms)))
