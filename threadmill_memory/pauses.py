"""The memory backend's schedule state (`Backend.set_schedule_paused`), a mixin of its own."""

from __future__ import annotations

import threading
from datetime import datetime

from threadmill_core.backend import SchedulePause, check_schedule_name

#: Guards the first use's making of a backend's pause state.
_making = threading.Lock()


class MemoryPauses:
    """Pause states in a dict, under a lock of their own; the class mixing it in gives `now`."""

    def now(self) -> datetime:  # pragma: no cover - the backend's own `now` is used
        raise NotImplementedError

    def _pauses_state(self) -> tuple[threading.Lock, dict[str, SchedulePause]]:
        state: tuple[threading.Lock, dict[str, SchedulePause]] | None = getattr(
            self, "_schedule_pauses", None
        )
        if state is None:
            with _making:
                state = getattr(self, "_schedule_pauses", None)
                if state is None:
                    state = (threading.Lock(), {})
                    self._schedule_pauses = state
        return state

    def set_schedule_paused(self, name: str, paused: bool) -> SchedulePause:
        check_schedule_name(name)
        lock, pauses = self._pauses_state()
        with lock:
            known = pauses.get(name)
            if known is not None and known.paused == bool(paused):
                return known
            pauses[name] = SchedulePause(bool(paused), self.now())
            return pauses[name]

    def schedule_pauses(self) -> dict[str, SchedulePause]:
        lock, pauses = self._pauses_state()
        with lock:
            return dict(pauses)
