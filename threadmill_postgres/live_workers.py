"""The PostgreSQL backend's live workers (`Backend.register_worker`), a mixin of its own.

The table ``live_workers`` of schema version 3 (``sql/v3.sql``). Each call
is one statement on the database's clock, which first deletes the entries
whose time is up.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from threadmill_core.live_workers import WorkerInfo, check_worker, check_worker_id, unpack
from threadmill_postgres.schema import quote_ident

if TYPE_CHECKING:
    from threadmill_postgres.connection import Database

# The row being written is left out of the pruning: one statement must not change a row twice.
REGISTER = """
WITH clock AS (SELECT {s}.now_ms() AS ms),
pruned AS (
    DELETE FROM {s}.live_workers
    WHERE expires <= (SELECT ms FROM clock) AND id <> %(id)s
)
INSERT INTO {s}.live_workers AS known (id, entry, last_seen, expires)
SELECT %(id)s, %(entry)s, ms, ms + %(ttl)s FROM clock
ON CONFLICT (id) DO UPDATE
    SET entry = EXCLUDED.entry, last_seen = EXCLUDED.last_seen, expires = EXCLUDED.expires
RETURNING last_seen
"""

UNREGISTER = """
WITH clock AS (SELECT {s}.now_ms() AS ms),
pruned AS (
    DELETE FROM {s}.live_workers
    WHERE expires <= (SELECT ms FROM clock) AND id <> %(id)s
),
gone AS (DELETE FROM {s}.live_workers WHERE id = %(id)s RETURNING expires)
SELECT count(*) FROM gone WHERE expires > (SELECT ms FROM clock)
"""

# The SELECT sees the table as it was before the DELETE: its own filter leaves the dead out.
WORKERS = """
WITH clock AS (SELECT {s}.now_ms() AS ms),
pruned AS (DELETE FROM {s}.live_workers WHERE expires <= (SELECT ms FROM clock))
SELECT entry, last_seen FROM {s}.live_workers
WHERE expires > (SELECT ms FROM clock)
ORDER BY id
"""


class PostgresLiveWorkers:
    """`register_worker`, `unregister_worker` and `workers` for `PostgresBackend`."""

    if TYPE_CHECKING:
        db: Database
        namespace: str

    def _live(self, statement: str) -> str:
        return statement.replace("{s}", quote_ident(self.namespace))

    def register_worker(self, info: WorkerInfo, ttl: timedelta) -> WorkerInfo:
        packed, ms = check_worker(info, ttl)
        ((seen,),) = self.db.fetch(
            self._live(REGISTER),
            {"id": info.id, "entry": packed, "ttl": ms},
            what="register_worker",
            repeatable=True,  # a repeat stores the same entry again
        )
        return unpack(packed, int(seen))

    def unregister_worker(self, worker_id: str) -> bool:
        check_worker_id(worker_id)
        ((count,),) = self.db.fetch(
            self._live(UNREGISTER), {"id": worker_id}, what="unregister_worker", repeatable=True
        )
        return bool(count)

    def workers(self) -> list[WorkerInfo]:
        rows = self.db.fetch(self._live(WORKERS), what="workers", repeatable=True)
        return [unpack(str(entry), int(seen)) for entry, seen in rows]
