"""What a worker does with the leases it holds, a mixin of `PostgresBackend`.

`extend_many`, `mark_started`, `record_progress`, `decide_many` (`complete`,
`retry`) and `release`: each call is one statement (sql/queries/working.sql) however many
leases it names, each lease fenced on its own by its token, answers in the
order given. Each is sent again after a lost reply: the token is kept after
a decision, so a repeat finds its own outcome and answers as the first time;
a release cleared the token, so a repeat changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import attrs

from threadmill_core import codec
from threadmill_core.checks import check_decision, check_delay, check_progress_updates, ttl_ms
from threadmill_core.clock import duration_ms, from_ms
from threadmill_core.errors import PayloadError
from threadmill_core.models import Decision, Lease, Progress, TaskResult, TaskResultStatus
from threadmill_postgres import rows

if TYPE_CHECKING:
    from threadmill_postgres.connection import Database
    from threadmill_postgres.options import PostgresOptions
    from threadmill_postgres.queries import Statements

READY = TaskResultStatus.READY
DEFERRED = TaskResultStatus.DEFERRED
SUCCESSFUL = TaskResultStatus.SUCCESSFUL
FAILED = TaskResultStatus.FAILED
CANCELLED = TaskResultStatus.CANCELLED

#: The states each kind of decision leaves a task in while its token stays:
#: a decision on a task in one of them is a repeat, answered from the store.
#: By completing or not: a retry of a task with a cancel request finalizes it CANCELLED.
REPEAT_STATES = {
    True: frozenset({SUCCESSFUL, FAILED, CANCELLED}),
    False: frozenset({READY, DEFERRED, CANCELLED}),
}


class PostgresLeases:
    """`extend`, `extend_many`, `mark_started`, `complete`, `retry`, `decide_many` and
    `release` for `PostgresBackend`, which mixes this in."""

    if TYPE_CHECKING:
        db: Database
        sql: Statements
        options: PostgresOptions
        channel: str
        _ttl_ms: int

    def extend(self, lease: Lease, lease_ttl: timedelta) -> Lease | None:
        return self.extend_many([lease], lease_ttl)[0]

    def extend_many(self, leases: Sequence[Lease], lease_ttl: timedelta) -> list[Lease | None]:
        """Every renewal in one statement; answers in the order given."""
        held_ms = ttl_ms("lease_ttl", lease_ttl)
        leases = list(leases)
        answers: list[Lease | None] = [None] * len(leases)
        sent = [(at, lease) for at, lease in enumerate(leases) if _sendable(lease)]
        if not sent:
            return answers
        params = {
            "ids": [lease.task_id for _, lease in sent],
            "tokens": [lease.token for _, lease in sent],
            "ttl": held_ms,
        }
        got = self.db.fetch(self.sql.extend_many, params, what="extend", repeatable=True)
        for (at, lease), (_n, deadline, progress, requested) in zip(sent, got, strict=True):
            if deadline is not None:
                record = attrs.evolve(
                    lease.record,
                    progress=rows.decode_progress(progress, lease.task_id),
                    cancel_requested_at=None if requested is None else from_ms(requested),
                )
                answers[at] = Lease(
                    token=lease.token,
                    deadline=from_ms(deadline),
                    record=record,
                    cancel_requested=requested is not None,
                )
        return answers

    def mark_started(self, leases: Sequence[Lease]) -> list[bool]:
        """Every mark in one statement, each fenced on its own; answers in the order given."""
        leases = list(leases)
        answers = [False] * len(leases)
        sent = [(at, lease) for at, lease in enumerate(leases) if _sendable(lease)]
        if not sent:
            return answers
        params = {
            "ids": [lease.task_id for _, lease in sent],
            "tokens": [lease.token for _, lease in sent],
        }
        got = self.db.fetch(self.sql.mark_started, params, what="mark_started", repeatable=True)
        for (at, _lease), (_n, marked) in zip(sent, got, strict=True):
            answers[at] = bool(marked)
        return answers

    def record_progress(self, updates: Sequence[tuple[Lease, Progress]]) -> list[bool]:
        """Every update in one statement, each fenced on its own; answers in the order given."""
        checked = check_progress_updates(updates)
        answers = [False] * len(checked)
        sent = [(at, lease, p) for at, (lease, p) in enumerate(checked) if _sendable(lease)]
        if not sent:
            return answers
        params = {
            "ids": [lease.task_id for _, lease, _ in sent],
            "tokens": [lease.token for _, lease, _ in sent],
            "heads": [rows.progress_head(progress) for _, _, progress in sent],
        }
        got = self.db.fetch(
            self.sql.record_progress, params, what="record_progress", repeatable=True
        )
        for (at, _lease, _progress), (_n, stored) in zip(sent, got, strict=True):
            answers[at] = bool(stored)
        return answers

    def complete(self, lease: Lease, record: TaskResult) -> TaskResult | None:
        return self.decide_many([Decision(lease=lease, record=record)])[0]

    def retry(self, lease: Lease, record: TaskResult, delay: timedelta) -> TaskResult | None:
        return self.decide_many([Decision(lease=lease, record=record, retry_delay=delay)])[0]

    def decide_many(self, decisions: Sequence[Decision]) -> list[TaskResult | None]:
        """Every decision in one statement, each fenced on its own; answers in the order given.

        Every decision is checked (`check_decision`) and its errors and value
        encoded before the statement is sent, so a bad one changes nothing.
        Of several decisions on one task in a batch, the first whose token is
        current is applied and the others are answered as if sent after it.
        """
        decisions = list(decisions)
        encoded: list[tuple[str, int, bytes, bytes | None]] = []
        for decision in decisions:
            check_decision(decision)
            errors = rows.encode_errors(tuple(decision.record.errors))
            if decision.retry_delay is None:
                result = rows.encode_result(decision.record)
                encoded.append((decision.record.status.value, 0, errors, result))
            else:
                delay = duration_ms(decision.retry_delay)
                encoded.append(("READY" if delay == 0 else "DEFERRED", delay, errors, None))
        answers: list[TaskResult | None] = [None] * len(decisions)
        sent = [at for at, decision in enumerate(decisions) if _sendable(decision.lease)]
        if not sent:
            return answers
        params = {
            "ids": [decisions[at].lease.task_id for at in sent],
            "tokens": [decisions[at].lease.token for at in sent],
            "targets": [encoded[at][0] for at in sent],
            "delays": [encoded[at][1] for at in sent],
            "errors": [encoded[at][2] for at in sent],
            "results": [encoded[at][3] for at in sent],
            "ttl": self._ttl_ms,
            "prune": self.options.prune_batch,
            "channel": self.channel,
        }
        got = self.db.fetch(self.sql.decide_many, params, what="decide", repeatable=True)
        applied: dict[str, TaskResult] = {}
        for at, row in zip(sent, got, strict=True):
            decision = decisions[at]
            (_n, current, was_applied, status, run_after, finished_at, errors, result) = row[:8]
            progress, requested = row[8:]
            if not current or not (was_applied or _sane(run_after, finished_at, requested)):
                continue  # stale, or a corrupt record refused (the reaper quarantines it)
            completing = decision.retry_delay is None
            state: dict[str, Any] = {
                "status": TaskResultStatus(status),
                "run_after": None if run_after is None else from_ms(run_after),
                "finished_at": None if finished_at is None else from_ms(finished_at),
                "progress": rows.decode_progress(progress, decision.lease.task_id),
                "cancel_requested_at": None if requested is None else from_ms(requested),
            }
            if was_applied:
                value = decision.record.return_value if state["status"] is SUCCESSFUL else None
                made = attrs.evolve(
                    decision.lease.record,
                    **state,
                    errors=tuple(decision.record.errors),
                    return_value=value,
                )
                applied[decision.lease.task_id] = answers[at] = made
            elif state["status"] in REPEAT_STATES[completing]:
                earlier = applied.get(decision.lease.task_id)
                answers[at] = (
                    earlier
                    if earlier is not None
                    else self._stored(decision.lease, state, errors, result)
                )
        return answers

    def _stored(
        self, lease: Lease, state: dict[str, Any], errors: bytes, result: bytes | None
    ) -> TaskResult:
        """The record a repeated decision answers: the lease's, with the state as stored."""
        try:
            decoded_errors = codec.decode_errors(errors)
            value = None if result is None else codec.decode_value(result)
        except PayloadError as exc:
            raise PayloadError(f"task {lease.task_id!r}: {exc}") from exc
        return attrs.evolve(lease.record, **state, errors=decoded_errors, return_value=value)

    def release(
        self, leases: Sequence[Lease], delay: timedelta = timedelta(0)
    ) -> list[TaskResult | None]:
        """Every release in one statement, each fenced on its own; answers in the order given."""
        leases = list(leases)
        wait_ms = check_delay(delay)
        answers: list[TaskResult | None] = [None] * len(leases)
        sent = [(at, lease) for at, lease in enumerate(leases) if _sendable(lease)]
        if not sent:
            return answers
        params = {
            "ids": [lease.task_id for _, lease in sent],
            "tokens": [lease.token for _, lease in sent],
            "delay": wait_ms,
            "channel": self.channel,
        }
        got = self.db.fetch(self.sql.release, params, what="release", repeatable=True)
        for (at, lease), (
            _n,
            attempts,
            worker_ids,
            started_at,
            last_attempted_at,
            status,
            due,
            finished_at,
            progress,
            requested,
        ) in zip(sent, got, strict=True):
            if attempts is None:
                continue
            if not _sane(due, finished_at, requested, started_at, last_attempted_at):
                # Poison given back (a claim quarantines it), its stored times unreadable:
                # answered None, so the rest of the batch is answered.
                continue
            answers[at] = attrs.evolve(
                lease.record,
                status=TaskResultStatus(status),
                run_after=None if due is None else from_ms(due),
                finished_at=None if finished_at is None else from_ms(finished_at),
                progress=rows.decode_progress(progress, lease.task_id),
                cancel_requested_at=None if requested is None else from_ms(requested),
                attempts=attempts,
                worker_ids=tuple(worker_ids),
                started_at=None if started_at is None else from_ms(started_at),
                last_attempted_at=None if last_attempted_at is None else from_ms(last_attempted_at),
            )
        return answers


def _sendable(lease: Lease) -> bool:
    """Whether a lease could be current: a token or id with NUL was never issued here."""
    return rows.storable(lease.task_id) and rows.storable(lease.token)


def _sane(*stamps: int | None) -> bool:
    """Whether every stored time is one a datetime can hold (a corrupt one is not)."""
    return all(stamp is None or rows.MIN_MS <= stamp <= rows.MAX_MS for stamp in stamps)
