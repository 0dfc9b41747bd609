"""Reads (`get`, `peek`, `counts`, `rates`) and operator actions (`requeue`, `cancel`,
`request_cancel`, `purge`), a part of `RedisBackend`."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from threadmill_core.backend import RATE_HISTORY
from threadmill_core.checks import check_limit, check_offset, check_purgeable, check_window
from threadmill_core.clock import duration_ms
from threadmill_core.models import QueueCounts, QueueRates, TaskResult, TaskResultStatus
from threadmill_redis.host import Host
from threadmill_redis.replies import Row, Status, answer


class RedisInspection(Host):
    """Each method one script call (`purge` one a batch of `purge_batch`; an operator's action
    two, a read and the action, see `_act`)."""

    # --- inspection --------------------------------------------------------------------

    def get(self, task_id: str) -> TaskResult | None:
        reply = self._run("get", [task_id, self._ttl_ms], repeatable=True)
        return None if reply is None else Row.parse(reply).record()

    def peek(
        self, queue: str, status: TaskResultStatus, *, offset: int = 0, limit: int = 100
    ) -> list[TaskResult]:
        args = [
            queue,
            TaskResultStatus(status).value,
            check_offset(offset),
            check_limit(limit),
            self._ttl_ms,
        ]
        reply = self._run("peek", args, repeatable=True)
        return [Row.parse(row).record() for row in reply]

    def counts(self) -> Mapping[str, QueueCounts]:
        flat = self._run("counts", [self._ttl_ms], repeatable=True)
        counts = {}
        for at in range(0, len(flat), 7):
            queue = flat[at].decode()
            ready, deferred, running, successful, failed, cancelled = flat[at + 1 : at + 7]
            counts[queue] = QueueCounts(
                queue=queue,
                ready=ready,
                deferred=deferred,
                running=running,
                successful=successful,
                failed=failed,
                cancelled=cancelled,
            )
        return dict(sorted(counts.items()))

    def rates(self, window: timedelta) -> Mapping[str, QueueRates] | None:
        """Counted in one-second buckets of the server clock over the last hour (`RATE_HISTORY`).

        The scripts that store, requeue and finish tasks count them as they
        change them (see `threadmill_redis.keys`); this reads the buckets of
        the window, and only those, in one round trip.
        """
        check_window(window)
        flat = self._run("rates", [duration_ms(window)], repeatable=True)
        covered = min(window, RATE_HISTORY)
        rates = {}
        for at in range(0, len(flat), 3):
            queue, entered, finished = flat[at].decode(), int(flat[at + 1]), int(flat[at + 2])
            if entered or finished:
                rates[queue] = QueueRates(
                    queue=queue, window=covered, entered=entered, finished=finished
                )
        return dict(sorted(rates.items()))

    # --- operator actions --------------------------------------------------------------

    def requeue(self, task_id: str) -> TaskResult | None:
        record = self._act("requeue", task_id, [self._ttl_ms], repeatable=False)
        if record is not None:
            self._notify([record.queue])
        return record

    def cancel(self, task_id: str) -> TaskResult | None:
        return self._act("cancel", task_id, [], repeatable=False)

    def request_cancel(self, task_id: str) -> TaskResult | None:
        """Repeated after a lost reply (the first request wins, so a repeat changes nothing)."""
        return self._act("request_cancel", task_id, [], repeatable=True)

    def _act(
        self, script: str, task_id: str, args: list[object], *, repeatable: bool
    ) -> TaskResult | None:
        """Run the operator's action `script` on the task as it was just read and decoded.

        A script cannot decode the codec's bytes, so the record is read first
        (one ``get.lua``) and decoded here: poison raises `PayloadError` naming
        the task before anything changes, as on every backend. The action then
        applies only if the task's stored state and payload are still the bytes
        that decoded (``lib/unchanged.lua``); if the task changed in between (a
        claim, a decision, a deletion), it answers CHANGED, having changed
        nothing, and both steps run again on what is stored now. Two round trips
        an action: operators' calls, never a worker's.
        """
        while True:
            read = self._run("get", [task_id, self._ttl_ms], repeatable=True)
            if read is None:
                return None
            row = Row.parse(read)
            row.record()  # poison raises here, before anything changes
            reply = self._run(
                script, [task_id, *args, row.state, row.payload], repeatable=repeatable
            )
            if reply[0] != Status.CHANGED:
                return answer(reply)

    def purge(self, queue: str, status: TaskResultStatus) -> int:
        status = check_purgeable(status)
        batch, purged = self.options.purge_batch, 0
        while True:
            args = [queue, status.value, batch, self._ttl_ms]
            deleted, live = self._run("purge", args, repeatable=False)
            purged += int(live)
            if deleted < batch:
                return purged
