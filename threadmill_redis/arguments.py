"""Checking and encoding what callers pass, before anything is sent to Redis.

Bad arguments raise here (`ValueError`, `TypeError`, `UnsupportedValue`), so
a refused call changes nothing: a batch is checked whole before any of it is
sent. Also `enqueued_many`: the records an enqueue answers, which for new tasks
follow from what was sent and the server's time, so they are never read back.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import attrs

from threadmill_core import codec
from threadmill_core.backend import CheckedRecords
from threadmill_core.clock import duration_ms, from_ms, to_ms
from threadmill_core.errors import UnsupportedValue
from threadmill_core.models import (
    TaskResult,
    TaskResultStatus,
    copier,
    copy_call,
)
from threadmill_redis.replies import Row, Status

_FINISHED = (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED)
_OK = int(Status.OK)


def positive_ms(name: str, value: timedelta) -> int:
    """A positive duration (a lease or claim TTL) in whole milliseconds, rounded up."""
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise ValueError(f"{name} must be a positive timedelta, got {value!r}")
    return duration_ms(value)


def delay_ms(delay: timedelta) -> int:
    """A retry delay in whole milliseconds, rounded up so it is never shortened."""
    if not isinstance(delay, timedelta) or delay < timedelta(0):
        raise ValueError(f"a retry delay must be a timedelta of zero or more, got {delay!r}")
    return duration_ms(delay)


def limit(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"limit must be an int of at least 1, got {value!r}")
    return value


def offset(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"offset must be an int of zero or more, got {value!r}")
    return value


def queue_names(queues: Sequence[str]) -> list[str]:
    if isinstance(queues, str):  # a str is a Sequence[str] of one-letter queue names
        raise TypeError(f"queues must be a sequence of queue names, not the str {queues!r}")
    return list(queues)


#: The fields of a record that `enqueue` takes from the caller; the scripts keep the rest.
#: The fields the scripts keep, as a task stored now has them (`enqueued_many`
#: sets the status, enqueued_at and run_after itself).
_NEW_STATE: dict[str, Any] = {
    field.name: field.default
    for field in attrs.fields(TaskResult)
    if field.name in codec.STATE_FIELDS - {"status", "enqueued_at", "run_after"}
}
#: Copies a record with those fields, as `enqueued_many` sets them.
_enqueued_copy = copier(TaskResult, [*_NEW_STATE, "status", "enqueued_at", "run_after"])


def payloads(records: Sequence[TaskResult]) -> list[bytes]:
    """The payload `enqueue` stores for each record: what never changes, encoded.

    That is the id, function, arguments, queue, priority and retry policy;
    the fields that change, and `run_after`, are left out, whatever the
    caller set, and kept beside it by the scripts. Every record is checked
    (`check_records`) before any is encoded (`encoded`).
    """
    check_records(records)
    return encoded(records, codec.EnqueuedEncoder())


def check_records(records: Sequence[TaskResult]) -> None:
    """Raise `UnsupportedValue` for the first record `enqueue` must refuse, naming the field.

    A record that passes encodes (`encoded`): `codec.check_record` and
    `codec.check_retry` refuse whatever the codec cannot write.
    """
    checked: object = None  # the retry policy checked last: a batch's records share one
    for record in records:
        codec.check_record(record)
        retry = record.retry
        if retry is not None and retry is not checked:
            codec.check_retry(retry)
            checked = retry


def encoded(records: Sequence[TaskResult], encode: codec.EnqueuedEncoder) -> list[bytes]:
    """The payloads of checked records (`check_records`), in order.

    Records of one task's calls share the encoding of what they share (see
    `codec.EnqueuedEncoder`); one encoder serves all of a call's records.
    """
    payloads: list[bytes] = []
    for record in records:
        try:
            payloads.append(encode(record))
        except (TypeError, ValueError) as exc:  # never for a checked record: a codec bug
            reason = f"cannot be encoded: {exc}"
            raise UnsupportedValue(f"task {record.id!r}", record, reason=reason) from exc
    return payloads


def encoded_calls(
    calls: CheckedRecords, start: int, stop: int, encode: codec.EnqueuedEncoder
) -> list[bytes]:
    """`encoded` for the records `start` to `stop` of a batch, from its parts."""
    shared, ids, args, kwargs = calls.shared, calls.ids, calls.args, calls.kwargs
    try:
        return encode.calls(shared, ids[start:stop], args[start:stop], kwargs[start:stop])
    except (TypeError, ValueError) as exc:  # never for a checked batch: a codec bug
        reason = f"cannot be encoded: {exc}"
        raise UnsupportedValue(f"a call of {shared.task_path!r}", calls, reason=reason) from exc


def enqueued_many(
    rows: Sequence[Any], records: Sequence[TaskResult], now_ms: int
) -> list[TaskResult]:
    """The records the rows of ``enqueue.lua`` (or ``enqueue_one.lua``) answer for `records`.

    A bare OK means stored now, at server time `now_ms`: the record follows
    from what was sent, so nothing is read back or decoded. It is DEFERRED
    when its `run_after` (in whole ms) is later than `now_ms`, else READY, as
    the script decides, and every other field the scripts keep is at its
    default. Any other row is the stored record of a repeated id.
    """
    results: list[TaskResult] = []
    # The changes for each run_after given (the records of a batch usually
    # share one), made once.
    changes_for: dict[datetime | None, dict[str, Any]] = {}
    for row, record in zip(rows, records, strict=True):
        if row != _OK:
            results.append(Row.parse(row).record())
            continue
        changes = changes_for.get(record.run_after)
        if changes is None:
            changes = changes_for[record.run_after] = _stored_now(record.run_after, now_ms)
        # Unchecked: the record was made by its class, and the changes are
        # the scripts' own values.
        results.append(_enqueued_copy(record, changes))
    return results


def enqueued_calls(
    rows: Sequence[Any], calls: CheckedRecords, start: int, now_ms: int
) -> list[TaskResult]:
    """`enqueued_many` for the records from `start` on of a batch, each made once, from its parts.

    The shared record is copied once with the state as stored now, then
    once per call with the call's id and arguments.
    """
    results: list[TaskResult] = []
    stored: TaskResult | None = None
    ids, args, kwargs = calls.ids, calls.args, calls.kwargs
    for index, row in enumerate(rows, start):
        if row != _OK:
            results.append(Row.parse(row).record())
            continue
        if stored is None:
            shared = calls.shared
            stored = _enqueued_copy(shared, _stored_now(shared.run_after, now_ms))
        results.append(
            copy_call(stored, {"id": ids[index], "args": args[index], "kwargs": kwargs[index]})
        )
    return results


def _stored_now(run_after: datetime | None, now_ms: int) -> dict[str, Any]:
    """The fields the scripts keep, for a task with `run_after` stored at server time `now_ms`.

    Every one as stored now, not as the caller may have set it: status
    DEFERRED when `run_after` (in whole ms) is later than `now_ms`, else
    READY; the rest at their defaults.
    """
    status = TaskResultStatus.READY
    if run_after is not None:
        ms = to_ms(run_after)
        run_after = from_ms(ms)
        if ms > now_ms:
            status = TaskResultStatus.DEFERRED
    return {**_NEW_STATE, "status": status, "enqueued_at": from_ms(now_ms), "run_after": run_after}


def outcome(record: TaskResult) -> tuple[str, bytes, bytes]:
    """Status, encoded errors and encoded return value (b"" for none, or None) of a `complete`."""
    if record.status not in _FINISHED:
        raise ValueError(f"complete takes SUCCESSFUL or FAILED, got {record.status}")
    result = b""
    # None is stored as no result at all, which reads back the same.
    if record.status is TaskResultStatus.SUCCESSFUL and record.return_value is not None:
        codec.check_value(record.return_value, "return_value")
        result = codec.encode_value(record.return_value)
    return record.status.value, codec.encode_errors(record.errors), result
