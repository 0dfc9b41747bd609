"""What a backend keeps of a schedule: whether it is paused, and since when.

See `threadmill_core.backend.Backend.set_schedule_paused`; the scheduler is
`threadmill_core.worker.scheduling`.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple


class SchedulePause(NamedTuple):
    """A schedule's pause state: `paused`, as of `since` (the backend's clock)."""

    paused: bool
    since: datetime


def check_schedule_name(name: object) -> str:
    """`name` if it can name a schedule (a non-empty printable str of at most 200 chars);
    else `ValueError` naming it, before anything changes."""
    if not isinstance(name, str) or not name or len(name) > 200 or not name.isprintable():
        raise ValueError(
            f"a schedule's name is a non-empty printable str of at most 200 chars, got {name!r}"
        )
    return name
