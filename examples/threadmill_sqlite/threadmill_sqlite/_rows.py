"""The codec boundary: task records to column values, and task rows back to records.

Every byte this backend stores is made by `threadmill_core.codec`; nothing
here hand-rolls JSON. `encode_*` refuse what the codec cannot carry unchanged
(`UnsupportedValue`) before anything is stored. `decode` rebuilds a record
from a row: the enqueued record from `payload`, every field the backend owns
from its column. Bytes that do not decode, or decode to another task, are
poison: `decode` raises `PayloadError` naming the task, and `quarantine`
gives the columns of the FAILED record that replaces them.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import attrs
from threadmill_core import codec
from threadmill_core.clock import from_ms
from threadmill_core.errors import PayloadError, TaskQuarantined, UnsupportedValue
from threadmill_core.models import (
    JSON,
    MAX_PRIORITY,
    MIN_PRIORITY,
    Progress,
    TaskError,
    TaskResult,
    TaskResultStatus,
)

#: The columns `decode` reads, in the order every task query selects them.
COLUMNS = (
    "id, queue, priority, status, payload, run_after, enqueued_at, started_at, "
    "last_attempted_at, finished_at, attempts, worker_ids, errors, return_value, progress, "
    "cancel_requested_at"
)

EMPTY_LIST = codec.dumps([])


def _encoded(what: str, value: object, encode: Any) -> bytes:
    try:
        data: bytes = encode(value)
    except (TypeError, ValueError) as exc:  # a lone surrogate, an int Python cannot parse back
        raise UnsupportedValue(what, value, reason=f"cannot be encoded: {exc}") from exc
    return data


def encode_payload(record: TaskResult) -> bytes:
    """The bytes stored for a new task: `record` with every backend-owned field reset.

    Raises `UnsupportedValue` naming the part the codec cannot carry unchanged
    (`codec.encode_record` alone would turn a tuple into a list silently).
    """
    codec.check_record(record)
    codec.check_retry(record.retry)
    as_enqueued = attrs.evolve(
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
        progress=None,
        cancel_requested_at=None,
    )
    return _encoded(f"task {record.id!r}", as_enqueued, codec.encode_record)


def encode_errors(errors: tuple[TaskError, ...] | list[TaskError]) -> bytes:
    """The `errors` column for these errors."""
    errors = tuple(errors)
    for index, error in enumerate(errors):
        if not isinstance(error, TaskError):
            raise UnsupportedValue(f"errors[{index}]", error, reason="is not a TaskError")
        for name in ("exception_class_path", "message", "traceback"):
            codec.check_value(getattr(error, name), f"errors[{index}].{name}")
    return _encoded("errors", errors, codec.encode_errors)


def encode_return_value(value: JSON) -> bytes:
    """The `return_value` column for a SUCCESSFUL task's value."""
    codec.check_value(value, "return_value")
    return _encoded("return_value", value, codec.encode_value)


def encode_progress(progress: Progress, now_ms: int) -> bytes:
    """The `progress` column for `progress` stored at `now_ms` (its `updated_at`)."""
    return codec.dumps(attrs.evolve(progress, updated_at=from_ms(now_ms)))


def encode_worker_ids(worker_ids: tuple[str, ...] | list[str]) -> bytes:
    """The `worker_ids` column."""
    ids = list(worker_ids)
    codec.check_value(ids, "worker_ids")
    return _encoded("worker_ids", ids, codec.dumps)


def check_worker(worker: object) -> str:
    """`worker` if it is a str the codec carries; `UnsupportedValue` otherwise."""
    if type(worker) is not str:
        raise UnsupportedValue("worker", worker, reason="must be a str")
    codec.check_value(worker, "worker")
    return worker


# --- decoding ----------------------------------------------------------------------------


def _blob(row: sqlite3.Row, column: str) -> bytes | str:
    value = row[column]
    if not isinstance(value, bytes | str):
        raise PayloadError(f"column {column} holds {type(value).__name__}, not codec bytes")
    return value


def _ms(row: sqlite3.Row, column: str) -> Any:
    value = row[column]
    if value is None:
        return None
    if type(value) is not int:
        raise PayloadError(f"column {column} holds {value!r}, not integer milliseconds")
    return from_ms(value)


def decode_errors(row: sqlite3.Row) -> tuple[TaskError, ...]:
    """The row's errors; `PayloadError` if they do not decode."""
    return codec.decode_errors(_blob(row, "errors"))


def decode_worker_ids(row: sqlite3.Row) -> tuple[str, ...]:
    """The row's worker ids; `PayloadError` if they do not decode to a list of str."""
    ids = codec.loads(_blob(row, "worker_ids"), list[Any])
    if not all(type(worker) is str for worker in ids):
        raise PayloadError(f"column worker_ids holds {ids!r}, not a list of str")
    return tuple(ids)


def decode(row: sqlite3.Row) -> TaskResult:
    """The record stored in `row` (selected as `COLUMNS`), as a fresh object.

    Raises `PayloadError` naming the task when any stored bytes do not decode,
    decode to another task's record (foreign bytes), or a column holds what
    this backend never writes there.
    """
    task_id = row["id"]
    try:
        record = codec.decode_record(_blob(row, "payload"))
        if record.id != task_id:
            raise PayloadError(f"the stored payload holds task {record.id!r}")
        raw_value = row["return_value"]
        value = None if raw_value is None else codec.decode_value(_blob(row, "return_value"))
        raw_progress = row["progress"]
        progress = None if raw_progress is None else codec.loads(_blob(row, "progress"), Progress)
        return attrs.evolve(
            record,
            queue=row["queue"],
            priority=row["priority"],
            status=TaskResultStatus(row["status"]),
            run_after=_ms(row, "run_after"),
            enqueued_at=_ms(row, "enqueued_at"),
            started_at=_ms(row, "started_at"),
            last_attempted_at=_ms(row, "last_attempted_at"),
            finished_at=_ms(row, "finished_at"),
            attempts=row["attempts"],
            errors=decode_errors(row),
            worker_ids=decode_worker_ids(row),
            return_value=value,
            progress=progress,
            cancel_requested_at=_ms(row, "cancel_requested_at"),
        )
    except PayloadError as exc:
        raise PayloadError(f"task {task_id!r}: {exc}") from exc
    except (TypeError, ValueError, OverflowError) as exc:  # a column out of any valid range
        raise PayloadError(f"task {task_id!r}: a stored column is invalid: {exc}") from exc


def decode_on(row: sqlite3.Row, held: TaskResult, decided: TaskResult) -> TaskResult:
    """The record a decision stored in `row`, read without its stored bytes (which do not
    decode): `held`, the lease's record, with the row's state and `decided`'s errors and value.
    """
    status = TaskResultStatus(row["status"])
    return attrs.evolve(
        held,
        status=status,
        run_after=_ms(row, "run_after"),
        finished_at=_ms(row, "finished_at"),
        errors=tuple(decided.errors),
        return_value=decided.return_value if status is TaskResultStatus.SUCCESSFUL else None,
    )


def quarantine(row: sqlite3.Row, reason: PayloadError, now_ms: int) -> dict[str, object]:
    """Every column but the placement (status, token, deadline, ...) of the FAILED record
    that replaces an undecodable row.

    It keeps what can still be read beside the bytes (id, queue, and the
    priority, times, attempts, errors and worker ids where those are still
    valid) and adds one `TaskQuarantined` error saying why; what is not valid
    any more is reset, so the new row always decodes. `task_path` is empty:
    the function's path was in the bytes that did not decode.
    """
    message = f"the stored task could not be decoded, so it cannot run: {reason}"
    try:
        errors = decode_errors(row)
    except PayloadError:
        errors = ()
    try:
        worker_ids: tuple[str, ...] = decode_worker_ids(row)
    except PayloadError:
        worker_ids = ()
    priority = row["priority"]
    if type(priority) is not int or not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        priority = 0
    attempts = row["attempts"]
    enqueued_at = _valid_ms(row["enqueued_at"])
    record = TaskResult(id=row["id"], task_path="", queue=row["queue"], priority=priority)
    return {
        "payload": encode_payload(record),
        "priority": priority,
        "enqueued_at": now_ms if enqueued_at is None else enqueued_at,
        "started_at": _valid_ms(row["started_at"]),
        "last_attempted_at": _valid_ms(row["last_attempted_at"]),
        "run_after": _valid_ms(row["run_after"]),
        "attempts": attempts if type(attempts) is int and attempts >= 0 else 0,
        "errors": encode_errors((*errors, TaskError.from_exception(TaskQuarantined(message)))),
        "worker_ids": encode_worker_ids(worker_ids),
        "return_value": None,
        "progress": None,
        "cancel_requested_at": None,
    }


def _valid_ms(value: object) -> int | None:
    """`value` if `from_ms` accepts it, else None."""
    if type(value) is not int:
        return None
    try:
        from_ms(value)
    except OverflowError:
        return None
    return value
