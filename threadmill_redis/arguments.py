"""Checking and encoding what callers pass, before anything is sent to Redis.

Bad arguments raise here (`ValueError`, `TypeError`, `UnsupportedValue`), so
a refused call changes nothing: a batch is checked whole before any of it is
sent. Also `enqueued`: the record an enqueue answers, which for a new task
follows from what was sent and the server's time, so it is never read back.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import attrs

from threadmill_core import codec
from threadmill_core.clock import duration_ms, from_ms
from threadmill_core.errors import UnsupportedValue
from threadmill_core.models import TaskResult, TaskResultStatus
from threadmill_redis.replies import Row, Status

_FINISHED = (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED)


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
_GIVEN = tuple(
    field.name for field in attrs.fields(TaskResult) if field.name not in codec.STATE_FIELDS
)


def payload(record: TaskResult) -> bytes:
    """The payload `enqueue` stores for `record`: what never changes, encoded.

    That is the id, function, arguments, queue, priority and retry policy;
    the fields that change, and `run_after`, are left out, whatever the
    caller set, and kept beside it by the scripts.
    """
    codec.check_arguments(record.args, record.kwargs)
    if record.retry is not None and record.retry.options is not None:
        codec.check_value(record.retry.options, "retry.options")
    try:
        return codec.encode_enqueued(record)
    except (TypeError, ValueError) as exc:  # what check_value cannot see, e.g. in task_path
        reason = f"cannot be encoded: {exc}"
        raise UnsupportedValue(f"task {record.id!r}", record, reason=reason) from exc


def enqueued(row: Any, record: TaskResult, now_ms: int, run_after_ms: int | None) -> TaskResult:
    """The record an ``enqueue.lua`` row answers for `record` (as the caller sent it).

    A bare OK means stored now, at server time `now_ms`: the record follows
    from what was sent, so nothing is read back or decoded. It is DEFERRED
    when `run_after_ms` is later than `now_ms`, else READY, as the script
    decides, and every other field the scripts keep is at its default. Any
    other row is the stored record of a repeated id.
    """
    if row != Status.OK:
        return Row.parse(row).record()
    deferred = run_after_ms is not None and run_after_ms > now_ms
    # Built afresh, not with attrs.evolve, which reads every field.
    return TaskResult(
        **{name: getattr(record, name) for name in _GIVEN},
        status=TaskResultStatus.DEFERRED if deferred else TaskResultStatus.READY,
        enqueued_at=from_ms(now_ms),
        run_after=None if run_after_ms is None else from_ms(run_after_ms),
    )


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
