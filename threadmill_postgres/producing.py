"""Storing new tasks (`PostgresBackend.enqueue`): all of a batch, or none of it.

A batch is checked and encoded whole before anything is sent. Up to
`enqueue_batch` tasks go in one statement, its own transaction (one round
trip, one commit). A longer batch goes one statement per slice of that size,
all of them in one transaction: should any slice fail (the server refuses a
value, the connection drops), nothing of the batch is stored, and sending it
again is safe. A connection lost during that COMMIT is sent again as well:
enqueue is idempotent on id, so a repeat of a batch that was stored answers
what is stored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from threadmill_core import codec
from threadmill_core.clock import to_ms
from threadmill_core.models import TaskResult
from threadmill_postgres import rows
from threadmill_postgres.connection import Connection, Database, Params, Rows
from threadmill_postgres.errors import PostgresBackendError
from threadmill_postgres.queries import Statements

#: Runs one statement with its parameters and returns its rows: on a pooled
#: connection of its own, or on the connection of the batch's transaction.
Run = Callable[[str, Params], Rows]

#: A record to store and its encoded payload.
Item = tuple[TaskResult, bytes]


@attrs.frozen
class Enqueuer:
    """`enqueue` for one namespace: its statements, retention, wake-up channel and slice size."""

    db: Database
    sql: Statements
    ttl_ms: int
    channel: str
    batch: int

    def enqueue(self, records: Sequence[TaskResult]) -> list[TaskResult]:
        """Store new tasks, all or none (see the module doc); the stored records, in order."""
        return self.enqueue_with(records, None)

    def enqueue_with(self, records: Sequence[TaskResult], run: Run | None) -> list[TaskResult]:
        """`enqueue`, its statements sent through `run` if given (in the caller's transaction,
        which commits them: `PostgresBackend.enqueue_on`), else each batch in its own."""
        records = list(records)
        rows.check_records(records)
        if not records:
            return []
        first: dict[str, Item] = {}
        for record in records:
            if record.id not in first:  # the first record of an id wins
                first[record.id] = (record, codec.encode_enqueued(record))
        items = list(first.values())
        if run is not None:
            stored = self._store_all(items, run)
        elif len(items) <= self.batch:
            stored = self._store(items, self._fetch)
        else:
            stored = self.db.transaction(
                lambda conn: self._store_all(items, _on(conn)), what="enqueue", repeatable=True
            )
        return [stored[record.id] for record in records]

    def _fetch(self, statement: str, params: Params) -> Rows:
        return self.db.fetch(statement, params, what="enqueue", repeatable=True)

    def _store_all(self, items: list[Item], run: Run) -> dict[str, TaskResult]:
        stored: dict[str, TaskResult] = {}
        for start in range(0, len(items), self.batch):
            stored.update(self._store(items[start : start + self.batch], run))
        return stored

    def _store(self, items: list[Item], run: Run) -> dict[str, TaskResult]:
        """Store one slice; what each of its ids holds now.

        Sent guarded first: if any id is stored already, nothing is inserted,
        and those records are decoded (poison raises before anything
        changes); then the rest is sent unguarded.
        """
        stored: dict[str, TaskResult] = {}
        answer = run(self.sql.enqueue, self._params(items, guard=True))
        known = [row for row in answer if row[3] is not None]
        if known:
            for row in known:
                record = rows.record(row, 3)
                stored[record.id] = record
            items = [item for item in items if item[0].id not in stored]
            answer = run(self.sql.enqueue, self._params(items, guard=False)) if items else []
        for (record, _payload), row in zip(items, answer, strict=True):
            _n, now_ms, status = row[:3]
            if status is not None:
                stored[record.id] = rows.enqueued(record, status, now_ms)
            elif row[3] is not None:
                stored[record.id] = rows.record(row, 3)
            else:  # another enqueue of this id won a race with this one: read what it stored
                found = run(self.sql.get, {"id": record.id, "ttl": self.ttl_ms})
                if not found:
                    raise PostgresBackendError(f"task {record.id!r} was stored and is gone")
                stored[record.id] = rows.record(found[0])
        return stored

    def _params(self, items: list[Item], *, guard: bool) -> Params:
        return {
            "ids": [record.id for record, _ in items],
            "queues": [record.queue for record, _ in items],
            "priorities": [record.priority for record, _ in items],
            "run_after": [
                None if record.run_after is None else to_ms(record.run_after) for record, _ in items
            ],
            "payloads": [payload for _, payload in items],
            "ttl": self.ttl_ms,
            "channel": self.channel,
            "guard": guard,
        }


def _on(conn: Connection) -> Run:
    """A `Run` on `conn` (inside its transaction): binary rows, as `Database.fetch` gives."""

    def run(statement: str, params: Params) -> Rows:
        cursor = conn.execute(statement, params, binary=True)
        return cursor.fetchall() if cursor.description is not None else []

    return run
