"""What the scripts answer, and how answers become core results (in this one place).

`REPLIES` gives each script's reply shape. A task row, as
``lib/task_row.lua`` builds it, is ``[code, id, state, payload, errors,
workers, result, progress, cancel request]``: the status code, then the
stored bytes (nil where absent; the payload only where the caller lacks
it), parsed by `Row.parse`. Python reassembles a `TaskResult` from the
payload (the record as enqueued) and the fields the scripts keep beside it,
the packed state read as `threadmill_redis.keys.STATE_LAYOUT` declares it
(`parse_state`).

A stored progress that does not decode is read as none (and logged): it is
what a task said about itself, never what it runs with, so it does not make
the task poison. A cancel request that is not decimal milliseconds is
corrupt state, and the task's record does not decode (`PayloadError`).
"""

from __future__ import annotations

import enum
import logging
import operator
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from threadmill_core import codec
from threadmill_core.clock import duration_ms, from_ms, to_ms
from threadmill_core.errors import PayloadError
from threadmill_core.models import (
    Decision,
    Lease,
    Progress,
    TaskError,
    TaskResult,
    TaskResultStatus,
    evolved,
)
from threadmill_redis.arguments import Group
from threadmill_redis.keys import STATE_FIELDS

log = logging.getLogger("threadmill_redis")

#: Each script's reply, by script name; "row" is a task row (see `Row`), "code" a bare
#: status code. The parser named last turns it into core results.
REPLIES: dict[str, str] = {
    "cancel": "row (`answer`)",
    "claim": "a row per task claimed, its result and cancel request nil and then its "
    "count of expired unstarted claims given back (`Row.parse`, `Row.lease`)",
    "claim_expired": "[queues given back], then a row per task claimed (`Row.parse`)",
    "complete": "row; an OK row carries only the new state, progress and cancel request "
    "(`decided`)",
    "counts": "flat: queue, then its six segment sizes, per queue",
    "decide_many": "[finished time ms, then per decision: a bare OK code for a completion "
    "applied now (an OK row without state when the task has progress or a cancel request), "
    "else a row as complete or retry answers] (`decided`, `completed`)",
    "enqueue": "[server time ms, then per task: a bare OK code when stored now, else an "
    "EXISTS row] (`enqueued`)",
    "expire_leases": "how many leases expired",
    "extend": "[code, deadline ms, progress, cancel request] (`extended`)",
    "extend_many": "[code, deadline ms, progress, cancel request] per lease (`extended`)",
    "get": "row, or nil when not found (`Row.parse`)",
    "harness_advance": "how many tasks moved (test support)",
    "mark_started": "a bare code per lease (`marked`)",
    "next_due": "ms until the next due task, or nil when nothing is deferred",
    "peek": "a row per task (`Row.parse`)",
    "promote_due": "[count promoted, then the queues woken]",
    "purge": "[tasks deleted, of them not expired]",
    "quarantine": "a bare code per task",
    "record_progress": "a bare code per update (`marked`)",
    "rates": "flat: queue, entered, finished, per queue",
    "register_worker": "the server time ms",
    "release": "a row per lease (`answer`)",
    "request_cancel": "row (`answer`)",
    "requeue": "row (`answer`)",
    "retry": "row; an OK row carries only the new state, progress and cancel request (`decided`)",
    "set_schedule_paused": '"<1|0>|<since ms>"',
    "unregister_worker": "1 when an entry was deleted, else 0",
    "workers": "the entries of the live workers",
}


class Status(enum.IntEnum):
    """Status codes of the scripts (``lib/code.lua`` holds the same table)."""

    #: Applied now.
    OK = 0
    #: Already applied by an earlier call with the same token, whose reply was
    #: lost; nothing changed, and the stored record answers as the first time.
    REPEAT = 1
    #: Not applied: the token is not current, or the task is in another state.
    REFUSED = 2
    #: No such task (never stored, deleted, or an expired result).
    NOT_FOUND = 3
    #: `enqueue` found the id already stored; the stored record answers.
    EXISTS = 4
    #: An operator's action found the task's stored bytes changed since its caller
    #: read them (``lib/unchanged.lua``); nothing changed, and the caller reads again.
    CHANGED = 5


#: Whether a status answers the call with the stored record; otherwise the
#: core result is None (a refusal, which is a return value, not an exception).
ANSWERED = {
    Status.OK: True,
    Status.REPEAT: True,
    Status.EXISTS: True,
    Status.REFUSED: False,
    Status.NOT_FOUND: False,
    Status.CHANGED: False,
}


class State(NamedTuple):
    """The task fields the scripts change, parsed from the ``state`` hash (see keys.py).

    A named tuple, not an attrs class: one is parsed for every task a claim
    or an acknowledgement touches.
    """

    status: TaskResultStatus
    priority: int
    attempts: int
    enqueued_at: datetime | None
    run_after: datetime | None
    started_at: datetime | None
    last_attempted_at: datetime | None
    finished_at: datetime | None
    deadline: datetime | None
    token: str | None
    queue: str


def _time(field: bytes) -> datetime | None:
    return from_ms(int(field)) if field else None


#: The packed fields `State` holds, in its order, picked by name from `STATE_FIELDS`
#: (``sort``, the scheduling key, is not among them: records do not show it).
_PICK = operator.itemgetter(*(STATE_FIELDS.index(name) for name in State._fields))
#: Each status by its packed text.
_STATUSES = {status.value.encode(): status for status in TaskResultStatus}


def parse_state(raw: bytes) -> State:
    """The state packed in `raw` (see `STATE_FIELDS`); `PayloadError` when not of that layout."""
    parts = raw.split(b"|", len(STATE_FIELDS) - 1)
    try:
        if len(parts) != len(STATE_FIELDS):
            raise ValueError("fields are missing")
        (status, priority, attempts, enqueued_at, run_after, started_at, last_attempted_at,
         finished_at, deadline, token, queue) = _PICK(parts)  # fmt: skip
        return State(
            _STATUSES[status], int(priority), int(attempts), _time(enqueued_at),
            _time(run_after), _time(started_at), _time(last_attempted_at), _time(finished_at),
            _time(deadline), token.decode() or None, queue.decode(),
        )  # fmt: skip
    except (ValueError, OverflowError, KeyError) as exc:
        raise PayloadError(f"stored task state is not valid: {raw!r}") from exc


def decode_progress(data: bytes | None, task_id: str) -> Progress | None:
    """A stored progress; None for none, and for bytes that do not decode (logged)."""
    if data is None:
        return None
    try:
        return codec.loads(data, Progress)
    except PayloadError as exc:
        log.warning("task %r: its stored progress is read as none: %s", task_id, exc)
        return None


def decode_requested(data: bytes | None) -> datetime | None:
    """A stored cancel request's time; `PayloadError` when it is not decimal milliseconds."""
    if data is None:
        return None
    try:
        return from_ms(int(data))
    except (ValueError, OverflowError) as exc:
        raise PayloadError(f"stored cancel request is not valid: {data!r}") from exc


def with_state(
    base: TaskResult,
    state: State,
    *,
    errors: tuple[TaskError, ...],
    worker_ids: tuple[str, ...],
    return_value: Any,
    progress: Progress | None = None,
    cancel_requested_at: datetime | None = None,
) -> TaskResult:
    """`base` (what was enqueued) with the fields the scripts own: `state`, and the rest given.

    A claim, a decision and a read make one per task (see `models.evolved`).
    """
    return evolved(
        base,
        status=state.status,
        enqueued_at=state.enqueued_at,
        run_after=state.run_after,
        started_at=state.started_at,
        last_attempted_at=state.last_attempted_at,
        finished_at=state.finished_at,
        attempts=state.attempts,
        errors=errors,
        worker_ids=worker_ids,
        return_value=return_value,
        progress=progress,
        cancel_requested_at=cancel_requested_at,
    )


def encode_worker(worker: str) -> bytes:
    """One entry of the workers hash; Lua appends it without looking inside."""
    data = worker.encode()
    return b"%d:%s" % (len(data), data)


def decode_workers(data: bytes | None) -> tuple[str, ...]:
    """The worker ids of one entry of the workers hash (see `encode_worker`)."""
    workers, at = [], 0
    data = data or b""
    try:
        while at < len(data):
            colon = data.index(b":", at)
            end = colon + 1 + int(data[at:colon])
            workers.append(data[colon + 1 : end].decode())
            at = end
    except ValueError as exc:
        raise PayloadError(f"stored worker ids are not valid: {data!r}") from exc
    return tuple(workers)


class Row(NamedTuple):
    """One task row of a script reply.

    A named tuple, not an attrs class, for the same reason as `State`: a
    claim parses one per task, and a tuple is made in a fraction of the time.
    """

    status: Status
    id: str
    state: bytes | None = None
    payload: bytes | None = None
    errors: bytes | None = None
    workers: bytes | None = None
    result: bytes | None = None
    progress: bytes | None = None
    cancel_requested: bytes | None = None
    #: A claim row's count of the task's expired unstarted claims given back.
    unstarted_expiries: int = 0

    @classmethod
    def parse(cls, reply: Sequence[Any]) -> Row:
        code, task_id, *rest = reply
        return cls(Status(code), task_id.decode(), *rest)

    def record(self, base: TaskResult | None = None) -> TaskResult:
        """The stored record; `base` stands in for the payload when the caller has it.

        Raises `PayloadError` naming the task when stored bytes do not decode,
        or decode to another task's record (poison).
        """
        return self._record(base)[0]

    def _record(self, base: TaskResult | None) -> tuple[TaskResult, State]:
        """The stored record and the state it was built from (parsed once)."""
        try:
            if self.state is None:
                raise PayloadError("no stored state")
            state = parse_state(self.state)
            errors = codec.decode_errors(self.errors) if self.errors else ()
            workers = decode_workers(self.workers)
            result = None if self.result is None else codec.decode_value(self.result)
            progress = decode_progress(self.progress, self.id)
            requested = decode_requested(self.cancel_requested)
            if base is None:
                if self.payload is None:
                    raise PayloadError("no stored payload")
                # Made once, with the state: the payload holds the rest.
                record = codec.decode_record(
                    self.payload,
                    status=state.status,
                    enqueued_at=state.enqueued_at,
                    run_after=state.run_after,
                    started_at=state.started_at,
                    last_attempted_at=state.last_attempted_at,
                    finished_at=state.finished_at,
                    attempts=state.attempts,
                    errors=errors,
                    worker_ids=workers,
                    return_value=result,
                    progress=progress,
                    cancel_requested_at=requested,
                )
                if record.id != self.id:
                    raise PayloadError(f"the stored bytes hold task {record.id!r}")
            else:
                record = with_state(
                    base,
                    state,
                    errors=errors,
                    worker_ids=workers,
                    return_value=result,
                    progress=progress,
                    cancel_requested_at=requested,
                )
        except PayloadError as exc:
            raise PayloadError(f"task {self.id!r}: {exc}") from exc
        return record, state

    def lease(self) -> Lease:
        """The lease a claim row grants (raises `PayloadError` for poison)."""
        record, state = self._record(None)
        if state.token is None or state.deadline is None:  # never: claim rows are RUNNING
            raise PayloadError(f"task {self.id!r}: claimed without a token or deadline")
        return Lease(
            token=state.token,
            deadline=state.deadline,
            record=record,
            unstarted_expiries=self.unstarted_expiries,
        )


def answer(reply: Sequence[Any], base: TaskResult | None = None) -> TaskResult | None:
    """The core result of a decision, requeue or cancel row: the record, or None if refused."""
    row = Row.parse(reply)
    if not ANSWERED[row.status]:
        return None
    return row.record(base)


def decided(
    reply: Sequence[Any], decision: Decision, finished_at: datetime | None = None
) -> TaskResult | None:
    """The core result of a complete, retry or decide_many row.

    Fast path: an OK row (applied now) carries only the new state (none from
    decide_many, whose completions finished at `finished_at`), the progress
    and the cancel request: the errors and return value are the decision's
    own, and the worker ids are the lease's, so nothing else is read back or
    decoded again. Of an OK completion only the finished time is read (see
    `completed`). A REPEAT row carries what the first call stored.
    """
    if reply[0] != Status.OK:
        return answer(reply, decision.lease.record)
    task_id = decision.lease.task_id
    try:
        progress = decode_progress(reply[3], task_id)
        requested = decode_requested(reply[4])
    except PayloadError as exc:
        raise PayloadError(f"task {task_id!r}: {exc}") from exc
    if decision.retry_delay is None:
        if reply[2]:
            finished_at = parse_state(reply[2]).finished_at
        return completed(decision, finished_at, progress, requested)
    claimed = decision.lease.record
    state = parse_state(reply[2])
    errors = tuple(decision.record.errors)
    return with_state(
        claimed,
        state,
        errors=errors,
        worker_ids=claimed.worker_ids,
        return_value=None,
        progress=progress,
        cancel_requested_at=requested,
    )


def completed(
    decision: Decision,
    finished_at: datetime | None,
    progress: Progress | None = None,
    cancel_requested_at: datetime | None = None,
) -> TaskResult:
    """The record a completion applied now stored, finished at `finished_at`, with the
    task's stored `progress` and `cancel_requested_at`.

    A completion changes no other field of the state the lease's record
    holds (see ``lib/mark_finished``), and the status is the decision's.
    """
    record = decision.record
    status = record.status
    return evolved(
        decision.lease.record,
        status=status,
        finished_at=finished_at,
        errors=tuple(record.errors),
        return_value=record.return_value if status is TaskResultStatus.SUCCESSFUL else None,
        progress=progress,
        cancel_requested_at=cancel_requested_at,
    )


def extended(reply: Sequence[Any], lease: Lease) -> Lease | None:
    """The core result of an extend reply ``[code, deadline ms, progress, cancel request]``:
    the lease renewed, its record with the task's progress and cancel request as stored."""
    status, deadline = Status(reply[0]), reply[1]
    if not ANSWERED[status]:
        return None
    try:
        requested = decode_requested(reply[3])
    except PayloadError as exc:
        raise PayloadError(f"task {lease.task_id!r}: {exc}") from exc
    record = evolved(
        lease.record,
        progress=decode_progress(reply[2], lease.task_id),
        cancel_requested_at=requested,
    )
    return Lease(
        token=lease.token,
        deadline=from_ms(int(deadline)),
        record=record,
        cancel_requested=requested is not None,
    )


def marked(reply: Any) -> bool:
    """The core result of one ``mark_started.lua`` answer: a bare code, OK when recorded."""
    return ANSWERED[Status(int(reply))]


def enqueued(rows: Sequence[Any], groups: Sequence[Group], now_ms: int) -> list[TaskResult]:
    """The records the rows of one ``enqueue.lua`` reply answer for the tasks of `groups` sent.

    A bare OK means stored now, at server time `now_ms`: the record follows
    from what was sent, so nothing is read back or decoded. It holds what the
    caller gave (id, task path, arguments, queue, priority, retry policy) and
    the state the script set: DEFERRED when its `run_after` (in whole ms) is
    later than `now_ms`, else READY, enqueued at `now_ms`; every other field
    at its default, whatever the caller had set. Any other row is the stored
    record of a repeated id.
    """
    sent = sum(len(calls) for _, calls in groups)
    if len(rows) != sent:
        raise ValueError(f"enqueue answered {len(rows)} rows for {sent} tasks")
    enqueued_at = from_ms(now_ms)
    results: list[TaskResult] = []
    at = 0
    for base, calls in groups:
        run_after = None if base.run_after is None else from_ms(to_ms(base.run_after))
        # Stored as whole milliseconds, rounded up (see `codec`).
        limit = base.time_limit
        time_limit = None if limit is None else timedelta(milliseconds=duration_ms(limit))
        deferred = run_after is not None and to_ms(run_after) > now_ms
        status = TaskResultStatus.DEFERRED if deferred else TaskResultStatus.READY
        first: TaskResult | None = None
        for task_id, args, kwargs in calls:
            row = rows[at]
            at += 1
            if row != Status.OK:
                results.append(Row.parse(row).record())
                continue
            if first is None:
                first = TaskResult(
                    id=task_id,
                    task_path=base.task_path,
                    args=args,
                    kwargs=kwargs,
                    queue=base.queue,
                    priority=base.priority,
                    retry=base.retry,
                    headers=base.headers,
                    time_limit=time_limit,
                    status=status,
                    enqueued_at=enqueued_at,
                    run_after=run_after,
                )
                results.append(first)
            else:  # the group's others differ from its first in id and arguments alone
                results.append(evolved(first, id=task_id, args=args, kwargs=kwargs))
    return results
