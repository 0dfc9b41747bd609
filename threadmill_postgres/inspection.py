"""Reads and operator actions of `PostgresBackend`, a mixin of its own.

`get`, `peek` and `counts` are one statement each (sql/queries/inspection.sql),
sent again after a lost reply. `requeue` and `cancel` lock and read the task
in one statement and change it in another, inside one transaction, because
the record must be decoded first (poison raises before anything changes);
`purge` deletes a batch per transaction (sql/queries/operator.sql). Each
transaction is sent again after a failure before its COMMIT; a connection
lost during the COMMIT raises `PostgresUnavailable`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs

from threadmill_core.checks import check_limit, check_offset, check_purgeable
from threadmill_core.clock import from_ms
from threadmill_core.models import QueueCounts, TaskResult, TaskResultStatus
from threadmill_postgres import rows

if TYPE_CHECKING:
    from threadmill_postgres.connection import Connection, Database
    from threadmill_postgres.options import PostgresOptions
    from threadmill_postgres.queries import Statements

READY = TaskResultStatus.READY
CANCELLED = TaskResultStatus.CANCELLED


class PostgresInspection:
    """`get`, `peek`, `counts`, `requeue`, `cancel` and `purge` for `PostgresBackend`, which
    mixes this in."""

    if TYPE_CHECKING:
        db: Database
        sql: Statements
        options: PostgresOptions
        channel: str
        _ttl_ms: int

    def get(self, task_id: str) -> TaskResult | None:
        if not rows.storable(task_id):
            return None
        found = self.db.fetch(
            self.sql.get, {"id": task_id, "ttl": self._ttl_ms}, what="get", repeatable=True
        )
        return rows.record(found[0]) if found else None

    def peek(
        self, queue: str, status: TaskResultStatus, *, offset: int = 0, limit: int = 100
    ) -> list[TaskResult]:
        status = TaskResultStatus(status)
        check_limit(limit)
        check_offset(offset)
        if not rows.storable(queue):
            return []
        params = {"queue": queue, "ttl": self._ttl_ms, "offset": offset, "limit": limit}
        found = self.db.fetch(self.sql.peek[status.value], params, what="peek", repeatable=True)
        return [rows.record(row) for row in found]

    def counts(self) -> Mapping[str, QueueCounts]:
        found = self.db.fetch(
            self.sql.counts, {"ttl": self._ttl_ms}, what="counts", repeatable=True
        )
        tallies: dict[str, dict[str, int]] = {}
        for queue, status, count in found:
            tallies.setdefault(queue, {})[status.lower()] = int(count)
        return {queue: QueueCounts(queue=queue, **tallies[queue]) for queue in sorted(tallies)}

    # --- operator actions ------------------------------------------------------------------

    def requeue(self, task_id: str) -> TaskResult | None:
        if not rows.storable(task_id):
            return None

        def block(conn: Connection) -> TaskResult | None:
            params = {"id": task_id, "ttl": self._ttl_ms, "channel": self.channel}
            found = conn.execute(self.sql.requeue_lock, params, binary=True).fetchall()
            if not found:
                return None
            record = rows.record(found[0])  # poison raises here, before anything changes
            conn.execute(self.sql.requeue, params)
            return attrs.evolve(
                record,
                status=READY,
                finished_at=None,
                return_value=None,
                progress=None,
                cancel_requested_at=None,
            )

        return self.db.transaction(block, what="requeue")

    def request_cancel(self, task_id: str) -> TaskResult | None:
        """One statement in a transaction, repeated after a lost reply (the first request
        wins, so a repeat changes nothing). Poison raises before the commit, so no request
        is stored for a record that does not decode."""
        if not rows.storable(task_id):
            return None

        def block(conn: Connection) -> TaskResult | None:
            found = conn.execute(self.sql.request_cancel, {"id": task_id}, binary=True).fetchall()
            return rows.record(found[0]) if found else None  # poison raises: rolled back

        return self.db.transaction(block, what="request_cancel", repeatable=True)

    def cancel(self, task_id: str) -> TaskResult | None:
        if not rows.storable(task_id):
            return None

        def block(conn: Connection) -> TaskResult | None:
            params = {"id": task_id}
            found = conn.execute(self.sql.cancel_lock, params, binary=True).fetchall()
            if not found:
                return None
            record = rows.record(found[0])  # poison raises here, before anything changes
            ((finished_at,),) = conn.execute(self.sql.cancel, params).fetchall()
            return attrs.evolve(record, status=CANCELLED, finished_at=from_ms(finished_at))

        return self.db.transaction(block, what="cancel")

    def purge(self, queue: str, status: TaskResultStatus) -> int:
        status = check_purgeable(status)
        if not rows.storable(queue):
            return 0
        statement = self.sql.purge[status.value]
        params = {"queue": queue, "batch": self.options.purge_batch, "ttl": self._ttl_ms}
        purged = 0

        def block(conn: Connection) -> tuple[int, int]:
            ((deleted, live),) = conn.execute(statement, params).fetchall()
            return int(deleted), int(live)

        while True:
            deleted, live = self.db.transaction(block, what="purge")
            purged += live
            if deleted < self.options.purge_batch:
                return purged
