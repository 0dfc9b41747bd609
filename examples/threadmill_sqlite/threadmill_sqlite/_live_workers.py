"""The SQLite backend's live workers (`Backend.register_worker`), mixed into it.

The table ``threadmill_live_workers`` (see ``schema.sql``); each call is one
``BEGIN IMMEDIATE`` transaction that reads the clock, like every write, and
first deletes the entries whose time is up.
"""

from __future__ import annotations

import contextlib
import sqlite3
from datetime import timedelta
from typing import TYPE_CHECKING

from threadmill_core.live_workers import WorkerInfo, check_worker, check_worker_id, unpack

PRUNE = "DELETE FROM threadmill_live_workers WHERE expires <= ?"


class SQLiteLiveWorkers:
    """`register_worker`, `unregister_worker` and `workers` for `SQLiteBackend`."""

    if TYPE_CHECKING:

        def _write(
            self, doing: str
        ) -> contextlib.AbstractContextManager[tuple[sqlite3.Connection, int]]: ...

    def register_worker(self, info: WorkerInfo, ttl: timedelta) -> WorkerInfo:
        packed, ms = check_worker(info, ttl)
        with self._write("register_worker") as (conn, now_ms):
            conn.execute(PRUNE, (now_ms,))
            conn.execute(
                "INSERT INTO threadmill_live_workers (id, entry, last_seen, expires) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET entry = excluded.entry, "
                "last_seen = excluded.last_seen, expires = excluded.expires",
                (info.id, packed, now_ms, now_ms + ms),
            )
        return unpack(packed, now_ms)

    def unregister_worker(self, worker_id: str) -> bool:
        check_worker_id(worker_id)
        with self._write("unregister_worker") as (conn, now_ms):
            conn.execute(PRUNE, (now_ms,))
            gone = conn.execute("DELETE FROM threadmill_live_workers WHERE id = ?", (worker_id,))
            return gone.rowcount > 0

    def workers(self) -> list[WorkerInfo]:
        with self._write("workers") as (conn, now_ms):
            conn.execute(PRUNE, (now_ms,))
            rows = conn.execute(
                "SELECT entry, last_seen FROM threadmill_live_workers ORDER BY id"
            ).fetchall()
        return [unpack(entry, seen) for entry, seen in rows]
