"""The codec boundary: records to column values, and rows back to records.

Every byte this backend stores is made by `threadmill_core.codec`; nothing
here hand-rolls JSON. The ``check_*`` functions refuse, before anything is
sent, what the codec cannot carry unchanged (`UnsupportedValue`) and what a
PostgreSQL ``text`` column cannot hold (a NUL character). `record` rebuilds a
record from a row: the payload as the producer gave it, every field the
backend keeps from its column. Bytes that do not decode, or decode to
another task, are poison: `record` raises `PayloadError` naming the task,
and `stand_in` is what replaces them when the task is quarantined. So are
columns a crash, a bug or a hand edit left out of range (a timestamp no
datetime can hold, a priority past the protocol's bounds).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs

from threadmill_core import checks, codec
from threadmill_core.clock import duration_ms, from_ms, to_ms
from threadmill_core.errors import PayloadError, TaskQuarantined, UnsupportedValue
from threadmill_core.models import (
    MAX_PRIORITY,
    MIN_PRIORITY,
    Lease,
    Progress,
    TaskError,
    TaskResult,
    TaskResultStatus,
)

log = logging.getLogger("threadmill_postgres")

#: The errors column of a task without errors, as the codec writes it.
NO_ERRORS = codec.encode_errors(())

#: The stored milliseconds a datetime can hold (years 1 to 9999); a timestamp
#: column outside them is corrupt (the queries spell them out too).
MIN_MS = to_ms(datetime.min.replace(tzinfo=UTC))
MAX_MS = to_ms(datetime.max.replace(tzinfo=UTC))

#: The columns of ``tasks`` a record is decoded from (see `record`), in the order every
#: query that reads a task selects them (as ``t.<column>``; tests/postgres/test_queries.py
#: checks the queries against it).
TASK_COLUMNS = (
    "id", "queue", "priority", "status", "payload", "run_after", "enqueued_at", "started_at",
    "last_attempted_at", "finished_at", "attempts", "errors", "worker_ids", "return_value",
    "progress", "cancel_requested_at",
)  # fmt: skip

#: The timestamp columns of `TASK_COLUMNS`, by their place in it.
_TIMESTAMPS = {5: "run_after", 6: "enqueued_at", 7: "started_at", 8: "last_attempted_at",
               9: "finished_at", 15: "cancel_requested_at"}  # fmt: skip

#: The fields `enqueue` resets, whatever the caller set (it keeps the rest).
_NEW_STATE: dict[str, Any] = {
    "started_at": None,
    "last_attempted_at": None,
    "finished_at": None,
    "attempts": 0,
    "errors": (),
    "worker_ids": (),
    "return_value": None,
    "progress": None,
    "cancel_requested_at": None,
}


def storable(value: object) -> bool:
    """Whether `value` is a str a PostgreSQL ``text`` column can hold (no NUL; valid UTF-8)."""
    if type(value) is not str or "\x00" in value:
        return False
    if value.isascii():
        return True
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def check_records(records: Sequence[TaskResult]) -> None:
    """Raise `UnsupportedValue` for the first record `enqueue` must refuse, naming the field.

    The shared check (`threadmill_core.checks.check_records`) refuses what
    the codec cannot write; an id or queue holding NUL, which the codec
    carries but ``text`` does not, is refused here too.
    """
    checks.check_records(records)
    for record in records:
        for name in ("id", "queue"):
            value = getattr(record, name)
            if not storable(value):
                raise UnsupportedValue(
                    name, value, reason="holds NUL, which PostgreSQL text cannot store"
                )


def check_worker(worker: object) -> str:
    """`worker` if it can be stored in ``worker_ids``; `UnsupportedValue` otherwise."""
    if type(worker) is not str:
        raise UnsupportedValue("worker", worker, reason="must be a str")
    codec.check_value(worker, "worker")
    if "\x00" in worker:
        raise UnsupportedValue("worker", worker, reason="holds NUL, which PostgreSQL cannot store")
    return worker


def encode_errors(errors: tuple[TaskError, ...]) -> bytes:
    """The errors column for a decision's errors; `UnsupportedValue` for what cannot be stored."""
    if not errors:
        return NO_ERRORS
    for index, error in enumerate(errors):
        if not isinstance(error, TaskError):
            raise UnsupportedValue(f"errors[{index}]", error, reason="is not a TaskError")
        for name in ("exception_class_path", "message", "traceback"):
            codec.check_value(getattr(error, name), f"errors[{index}].{name}")
    return codec.encode_errors(tuple(errors))


def encode_result(record: TaskResult) -> bytes | None:
    """The return_value column of a completion: the value's bytes (SUCCESSFUL only), else NULL.

    None is stored as no value at all, which reads back the same.
    """
    if record.status is not TaskResultStatus.SUCCESSFUL or record.return_value is None:
        return None
    return codec.encode_value(record.return_value)


def enqueued(record: TaskResult, status: str, now_ms: int) -> TaskResult:
    """The record `enqueue` answers for `record`, stored now (at `now_ms`) with `status`.

    Fast path: it follows from what was sent, so nothing is read back: every field the
    backend keeps is as a new task has it, `run_after` at millisecond
    resolution, whatever the caller had set.
    """
    run_after = record.run_after
    if run_after is not None:
        run_after = from_ms(to_ms(run_after))
    limit = record.time_limit  # stored as whole milliseconds, rounded up (see `codec`)
    return attrs.evolve(
        record,
        time_limit=None if limit is None else timedelta(milliseconds=duration_ms(limit)),
        **_NEW_STATE,
        status=TaskResultStatus(status),
        enqueued_at=from_ms(now_ms),
        run_after=run_after,
    )


#: How a progress's codec bytes end when its ``updated_at`` is None: the last key's value.
_UNSTAMPED = b"null}"


def progress_head(progress: Progress) -> bytes:
    """`progress`'s codec bytes up to the value of ``updated_at``, its last key.

    ``record_progress`` completes them with the database's time and ``}``, so
    the stored bytes are what `codec.dumps` writes for the progress stamped
    then, and `decode_progress` reads them back.
    """
    data = codec.dumps(attrs.evolve(progress, updated_at=None))
    if not data.endswith(b'"updated_at":' + _UNSTAMPED):  # never: the codec writes fields in order
        raise ValueError(f"unexpected progress encoding: {data!r}")
    return data[: -len(_UNSTAMPED)]


def decode_progress(data: bytes | None, task_id: str) -> Progress | None:
    """A stored progress column; None for NULL, and for bytes that do not decode (logged).

    A progress is what a task said about itself, never what it runs with, so
    a corrupt one does not make the task poison.
    """
    if data is None:
        return None
    try:
        return codec.loads(bytes(data), Progress)
    except PayloadError as exc:
        log.warning("task %r: its stored progress is read as none: %s", task_id, exc)
        return None


def _ms(value: object) -> Any:
    return None if value is None else from_ms(int(value))  # type: ignore[call-overload]  # a bigint column, an int or None


def record(row: Sequence[Any], at: int = 0) -> TaskResult:
    """The record in `row`, whose `TASK_COLUMNS` start at index `at`.

    Raises `PayloadError` naming the task when its payload, errors or result
    do not decode, or the payload holds another task (foreign bytes).
    """
    (
        task_id,
        queue,
        priority,
        status,
        payload,
        run_after,
        enqueued_at,
        started_at,
        last_attempted_at,
        finished_at,
        attempts,
        errors,
        worker_ids,
        return_value,
        progress,
        cancel_requested_at,
    ) = row[at : at + 16]
    try:
        made = codec.decode_record(
            payload,
            status=TaskResultStatus(status),
            enqueued_at=_ms(enqueued_at),
            run_after=_ms(run_after),
            started_at=_ms(started_at),
            last_attempted_at=_ms(last_attempted_at),
            finished_at=_ms(finished_at),
            attempts=attempts,
            errors=codec.decode_errors(errors),
            worker_ids=tuple(worker_ids),
            return_value=None if return_value is None else codec.decode_value(return_value),
            progress=decode_progress(progress, task_id),
            cancel_requested_at=_ms(cancel_requested_at),
        )
        _check_owner(made, task_id, queue, priority)
    except PayloadError as exc:
        raise PayloadError(f"task {task_id!r}: {exc}") from exc
    except (TypeError, ValueError) as exc:  # a field the payload holds, out of any valid range
        raise PayloadError(f"task {task_id!r}: the stored payload is invalid: {exc}") from exc
    except OverflowError as exc:  # a timestamp column no datetime can hold
        raise PayloadError(f"task {task_id!r}: {out_of_range(row[at : at + 16])}") from exc
    return made


def out_of_range(columns: Sequence[Any]) -> str:
    """What is wrong with a row's timestamp columns (`TASK_COLUMNS`), for a quarantine's error."""
    wrong = [
        f"{name} {columns[place]} ms"
        for place, name in _TIMESTAMPS.items()
        if columns[place] is not None and not MIN_MS <= columns[place] <= MAX_MS
    ]
    return f"a stored timestamp is out of range ({', '.join(wrong) or 'unknown column'})"


def lease(row: Sequence[Any]) -> Lease:
    """The lease in a claim's row (a worker's or the reaper's): its place in the answer,
    token and deadline, then `TASK_COLUMNS`, then the task's count of give-backs
    (a reaper's token starts with ``r``: its lease carries 0)."""
    expiries = 0 if row[1].startswith("r") else row[LEASE_EXPIRIES]
    return Lease(
        token=row[1], deadline=from_ms(row[2]), record=record(row, 3), unstarted_expiries=expiries
    )


#: Where a claim's row holds what quarantine needs (see `lease`).
LEASE_TOKEN, LEASE_ID, LEASE_QUEUE, LEASE_PRIORITY, LEASE_ERRORS = 1, 3, 4, 5, 14
#: Where a claim's row holds the task's count of give-backs (after TASK_COLUMNS).
LEASE_EXPIRIES = 19


def _check_owner(made: TaskResult, task_id: str, queue: str, priority: int) -> None:
    """Refuse a payload that is not this row's: another task's bytes, copied or corrupted."""
    if made.id != task_id or made.queue != queue or made.priority != priority:
        raise PayloadError(
            f"the stored payload holds task {made.id!r} of queue {made.queue!r} "
            f"(priority {made.priority}), not this row's"
        )


def stand_in(row: Sequence[Any], reason: PayloadError) -> tuple[bytes, bytes, int]:
    """The payload, errors and priority that replace a claimed poison task's (a claim's `row`).

    The payload is a readable record with an empty `task_path` (the function's
    path was in the bytes that did not decode), so the task can still be
    read, counted and purged; the errors are those still readable, and one
    `TaskQuarantined` error saying why. A priority out of the protocol's
    bounds is replaced by the nearest bound (the error gives the stored one).
    """
    task_id, queue, errors = row[LEASE_ID], row[LEASE_QUEUE], row[LEASE_ERRORS]
    priority = min(max(row[LEASE_PRIORITY], MIN_PRIORITY), MAX_PRIORITY)
    try:
        kept = codec.decode_errors(errors)
    except PayloadError:
        kept = ()
    message = f"the stored payload could not be decoded, so the task cannot run: {reason}"
    error = TaskError.from_exception(TaskQuarantined(message))
    placeholder = TaskResult(id=task_id, task_path="", queue=queue, priority=priority)
    return codec.encode_enqueued(placeholder), codec.encode_errors((*kept, error)), priority
