"""The PostgreSQL backend's schedule state (`Backend.set_schedule_paused`), a mixin of its own.

The table ``schedules`` of schema version 2 (``sql/v2.sql``); the queries
are in ``sql/queries/schedules.sql``. The write is one statement: an upsert
that changes a row only when its flag changes, answering with the row as it
stands after it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from threadmill_core.backend import SchedulePause, check_schedule_name
from threadmill_core.clock import from_ms

if TYPE_CHECKING:
    from threadmill_postgres.connection import Database
    from threadmill_postgres.queries import Statements


class PostgresPauses:
    """`set_schedule_paused` and `schedule_pauses` for `PostgresBackend`, which mixes this in."""

    if TYPE_CHECKING:
        db: Database
        sql: Statements

    def set_schedule_paused(self, name: str, paused: bool) -> SchedulePause:
        check_schedule_name(name)
        ((flag, since),) = self.db.fetch(
            self.sql.set_schedule_paused,
            {"name": name, "paused": bool(paused)},
            what="set_schedule_paused",
            repeatable=True,  # a repeat finds its own write and changes nothing
        )
        return SchedulePause(bool(flag), from_ms(int(since)))

    def schedule_pauses(self) -> dict[str, SchedulePause]:
        rows = self.db.fetch(self.sql.schedule_pauses, what="schedule_pauses", repeatable=True)
        return {
            str(name): SchedulePause(bool(flag), from_ms(int(since))) for name, flag, since in rows
        }
