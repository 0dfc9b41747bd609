"""The PostgreSQL backend's live workers (`Backend.register_worker`), a mixin of its own.

The table ``live_workers`` of schema version 3 (``sql/v3.sql``); the queries
are in ``sql/queries/live_workers.sql``. Each call is one statement on the
database's clock, which first deletes the entries whose time is up.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from threadmill_core.live_workers import WorkerInfo, check_worker, check_worker_id, unpack

if TYPE_CHECKING:
    from threadmill_postgres.connection import Database
    from threadmill_postgres.queries import Statements


class PostgresLiveWorkers:
    """`register_worker`, `unregister_worker` and `workers` for `PostgresBackend`."""

    if TYPE_CHECKING:
        db: Database
        sql: Statements

    def register_worker(self, info: WorkerInfo, ttl: timedelta) -> WorkerInfo:
        packed, ms = check_worker(info, ttl)
        ((seen,),) = self.db.fetch(
            self.sql.register_worker,
            {"id": info.id, "entry": packed, "ttl": ms},
            what="register_worker",
            repeatable=True,  # a repeat stores the same entry again
        )
        return unpack(packed, int(seen))

    def unregister_worker(self, worker_id: str) -> bool:
        check_worker_id(worker_id)
        ((count,),) = self.db.fetch(
            self.sql.unregister_worker, {"id": worker_id}, what="unregister_worker", repeatable=True
        )
        return bool(count)

    def workers(self) -> list[WorkerInfo]:
        rows = self.db.fetch(self.sql.workers, what="workers", repeatable=True)
        return [unpack(str(entry), int(seen)) for entry, seen in rows]
