"""The PostgreSQL backend's schedule state (`Backend.set_schedule_paused`), a mixin of its own.

The table ``schedules`` of schema version 2 (``sql/v2.sql``). The write is
one statement: an upsert that changes a row only when its flag changes,
answering with the row as it stands after it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from threadmill_core.backend import SchedulePause, check_schedule_name
from threadmill_core.clock import from_ms
from threadmill_postgres.schema import quote_ident

if TYPE_CHECKING:
    from threadmill_postgres.connection import Database

SET_PAUSED = """
WITH changed AS (
    INSERT INTO {s}.schedules AS known (name, paused, since)
    VALUES (%(name)s, %(paused)s, {s}.now_ms())
    ON CONFLICT (name) DO UPDATE SET paused = EXCLUDED.paused, since = EXCLUDED.since
        WHERE known.paused IS DISTINCT FROM EXCLUDED.paused
    RETURNING paused, since
)
SELECT paused, since FROM changed
UNION ALL
SELECT paused, since FROM {s}.schedules
WHERE name = %(name)s AND NOT EXISTS (SELECT 1 FROM changed)
"""

PAUSES = "SELECT name, paused, since FROM {s}.schedules"


class PostgresPauses:
    """`set_schedule_paused` and `schedule_pauses` for `PostgresBackend`, which mixes this in."""

    if TYPE_CHECKING:
        db: Database
        namespace: str

    def set_schedule_paused(self, name: str, paused: bool) -> SchedulePause:
        check_schedule_name(name)
        statement = SET_PAUSED.replace("{s}", quote_ident(self.namespace))
        ((flag, since),) = self.db.fetch(
            statement,
            {"name": name, "paused": bool(paused)},
            what="set_schedule_paused",
            repeatable=True,  # a repeat finds its own write and changes nothing
        )
        return SchedulePause(bool(flag), from_ms(int(since)))

    def schedule_pauses(self) -> dict[str, SchedulePause]:
        rows = self.db.fetch(
            PAUSES.replace("{s}", quote_ident(self.namespace)),
            what="schedule_pauses",
            repeatable=True,
        )
        return {
            str(name): SchedulePause(bool(flag), from_ms(int(since))) for name, flag, since in rows
        }
