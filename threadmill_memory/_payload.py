"""The memory backend's codec boundary: every record it stores or returns passes through here.

`encode` refuses what the codec cannot carry unchanged before anything is
stored, and proves the bytes read back; `decode` turns stored bytes into a
fresh record, or a `PayloadError` naming the task (poison); `quarantined`
is the record that replaces poison.
"""

from __future__ import annotations

from datetime import datetime

from threadmill_core import codec
from threadmill_core.errors import PayloadError, TaskQuarantined, UnsupportedValue
from threadmill_core.models import TaskError, TaskResult, TaskResultStatus


def encode(record: TaskResult) -> tuple[bytes, TaskResult]:
    """The bytes to store for `record`, and the record as they read back.

    Raises `UnsupportedValue` for any value the codec cannot carry unchanged:
    `codec.encode_record` itself would turn a tuple into a list without a word.
    """
    codec.check_record(record)
    codec.check_retry(record.retry)
    codec.check_value(record.return_value, "return_value")
    try:
        data = codec.encode_record(record)
    except (TypeError, ValueError) as exc:  # a lone surrogate in a str, an int of 5000 digits
        raise UnsupportedValue(
            f"task {record.id!r}", record, reason=f"cannot be encoded: {exc}"
        ) from exc
    return data, decode(record.id, data)


def decode(task_id: str, data: bytes) -> TaskResult:
    """The record stored as `data` for `task_id`, as a fresh object.

    Raises `PayloadError` naming the task when the bytes do not decode, or
    decode to another task's record (foreign bytes).
    """
    try:
        record = codec.decode_record(data)
    except PayloadError as exc:
        raise PayloadError(f"task {task_id!r}: {exc}") from exc
    if record.id != task_id:
        raise PayloadError(f"task {task_id!r}: the stored bytes hold task {record.id!r}")
    return record


def quarantined(
    task_id: str, queue: str, priority: int, reason: PayloadError, now: datetime
) -> TaskResult:
    """The FAILED record that replaces undecodable bytes: what is known beside them, and why.

    `task_path` is empty: the function's path was in the bytes that do not decode.
    """
    message = f"the stored payload could not be decoded, so the task cannot run: {reason}"
    return TaskResult(
        id=task_id,
        task_path="",
        queue=queue,
        priority=priority,
        status=TaskResultStatus.FAILED,
        finished_at=now,
        errors=(TaskError.from_exception(TaskQuarantined(message)),),
    )
