"""The SQLite backend's schedule state (`Backend.set_schedule_paused`), mixed into it.

The table ``threadmill_schedules`` (see ``schema.sql``); the write is one
``BEGIN IMMEDIATE`` transaction that reads the clock, like every write.
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import TYPE_CHECKING

from threadmill_core.backend import SchedulePause, check_schedule_name
from threadmill_core.clock import from_ms


class SQLitePauses:
    """`set_schedule_paused` and `schedule_pauses` for `SQLiteBackend`, which mixes this in."""

    if TYPE_CHECKING:

        def _write(
            self, doing: str
        ) -> contextlib.AbstractContextManager[tuple[sqlite3.Connection, int]]: ...

        def _read(
            self, doing: str
        ) -> contextlib.AbstractContextManager[tuple[sqlite3.Connection, int]]: ...

    def set_schedule_paused(self, name: str, paused: bool) -> SchedulePause:
        check_schedule_name(name)
        with self._write("set_schedule_paused") as (conn, now_ms):
            row = conn.execute(
                "SELECT paused, since FROM threadmill_schedules WHERE name = ?", (name,)
            ).fetchone()
            if row is not None and bool(row[0]) == bool(paused):
                return SchedulePause(bool(row[0]), from_ms(row[1]))
            conn.execute(
                "INSERT INTO threadmill_schedules (name, paused, since) VALUES (?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, since = excluded.since",
                (name, int(bool(paused)), now_ms),
            )
            return SchedulePause(bool(paused), from_ms(now_ms))

    def schedule_pauses(self) -> dict[str, SchedulePause]:
        with self._read("schedule_pauses") as (conn, _now_ms):
            rows = conn.execute("SELECT name, paused, since FROM threadmill_schedules").fetchall()
        return {name: SchedulePause(bool(flag), from_ms(since)) for name, flag, since in rows}
