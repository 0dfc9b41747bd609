"""Checking and encoding what callers pass, before anything is sent to Redis.

Bad arguments raise here (`ValueError`, `TypeError`, `UnsupportedValue`), so
a refused call changes nothing: a batch is checked whole before any of it is
sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import attrs

from threadmill_core import codec
from threadmill_core.clock import duration_ms
from threadmill_core.errors import UnsupportedValue
from threadmill_core.models import TaskResult, TaskResultStatus

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


def stored_form(record: TaskResult) -> tuple[TaskResult, bytes]:
    """What `enqueue` stores for `record`: the record as enqueued, and its payload bytes.

    The payload carries what never changes (id, function, arguments, queue,
    priority, retry policy); the fields the backend owns are reset here and
    kept beside it by the scripts.
    """
    codec.check_arguments(record.args, record.kwargs)
    if record.retry is not None and record.retry.options is not None:
        codec.check_value(record.retry.options, "retry.options")
    base = attrs.evolve(
        record,
        status=TaskResultStatus.READY,
        enqueued_at=None,
        run_after=None,
        started_at=None,
        last_attempted_at=None,
        finished_at=None,
        attempts=0,
        errors=(),
        worker_ids=(),
        return_value=None,
    )
    try:
        payload = codec.encode_record(base)
    except (TypeError, ValueError) as exc:  # what check_value cannot see, e.g. in task_path
        reason = f"cannot be encoded: {exc}"
        raise UnsupportedValue(f"task {record.id!r}", record, reason=reason) from exc
    return base, payload


def outcome(record: TaskResult) -> tuple[str, bytes, bytes]:
    """Status, encoded errors and encoded return value (b"" for none) of a `complete`."""
    if record.status not in _FINISHED:
        raise ValueError(f"complete takes SUCCESSFUL or FAILED, got {record.status}")
    result = b""
    if record.status is TaskResultStatus.SUCCESSFUL:
        codec.check_value(record.return_value, "return_value")
        result = codec.encode_value(record.return_value)
    return record.status.value, codec.encode_errors(record.errors), result
