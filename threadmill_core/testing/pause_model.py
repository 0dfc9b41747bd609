"""The schedules' pause states as the protocol keeps them: a naive model, a plain dict.

`Backend.set_schedule_paused` stores a flag and the time it was set, and
setting the flag a schedule already has changes nothing; `schedule_pauses`
lists what is stored. The state machine runs `PauseModel` beside the backend
(`threadmill_core.testing._machine.operator_rules`), as it runs
`ProtocolModel` for tasks.
"""

from __future__ import annotations


class PauseModel:
    """Each schedule's ``(paused, since_ms)``, by name."""

    def __init__(self) -> None:
        self.states: dict[str, tuple[bool, int]] = {}

    def set(self, name: str, paused: bool, now_ms: int) -> tuple[bool, int]:
        """The state `set_schedule_paused(name, paused)` leaves, at `now_ms`, and answers."""
        known = self.states.get(name)
        if known is not None and known[0] == paused:
            return known
        self.states[name] = (paused, now_ms)
        return self.states[name]
