"""What the scripts are sent: core models as the ARGV of ``lua/*.lua``.

The caller has checked its arguments already (`threadmill_core.checks`), so
a refused call never gets here; these only encode.
`threadmill_redis.replies` is the other direction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from threadmill_core import codec
from threadmill_core.backend import TaskCall
from threadmill_core.clock import to_ms
from threadmill_core.models import Progress, TaskResult, TaskResultStatus
from threadmill_redis.errors import (
    PartlyEnqueued,
    PartlyEnqueuedUnavailable,
    RedisBackendError,
    RedisUnavailable,
)

#: Tasks to store: the record (or template) giving what is not a call's own, and the calls.
Group = tuple[TaskResult, Sequence[TaskCall]]


def chunks(groups: Sequence[Group], size: int) -> list[list[Group]]:
    """`groups` cut into chunks of at most `size` tasks, in order; a group may be split."""
    made: list[list[Group]] = []
    chunk: list[Group] = []
    room = size
    for base, calls in groups:
        start = 0
        while start < len(calls):
            part = calls[start : start + room]
            chunk.append((base, part))
            start += len(part)
            room -= len(part)
            if not room:
                made.append(chunk)
                chunk, room = [], size
    if chunk:
        made.append(chunk)
    return made


def enqueue_runs(groups: Sequence[Group], notify_index: Mapping[str, int]) -> list[Any]:
    """``enqueue.lua``'s ARGV after ``notify_cap``: the tasks of `groups` in runs (see its header).

    Consecutive tasks that share queue, priority and `run_after` (in whole
    ms; the calls of one `Broker.enqueue_many` all do) make one run, headed
    by what they share and the KEYS index of their queue's notify list
    (`notify_index`), then each task's id and payload. A checked task always
    encodes; the payload holds what never changes (`codec.encode_enqueued`),
    the scripts keep the rest beside it. A group's payloads are encoded
    together (`codec.encode_calls`), so what its calls share is read and
    encoded once.
    """
    runs: list[tuple[tuple[str, int, int | None], list[str | bytes]]] = []
    for base, calls in groups:
        run_after = None if base.run_after is None else to_ms(base.run_after)
        head = (base.queue, base.priority, run_after)
        if not runs or runs[-1][0] != head:
            runs.append((head, []))
        pairs = runs[-1][1]
        for (task_id, _, _), payload in zip(calls, codec.encode_calls(base, calls), strict=True):
            pairs += (task_id, payload)
    args: list[Any] = []
    for (queue, priority, run_after), pairs in runs:
        args += (len(pairs) // 2, queue, priority, "" if run_after is None else run_after)
        args.append(notify_index[queue])
        args += pairs
    return args


def outcome(record: TaskResult) -> tuple[str, bytes, bytes]:
    """Status, encoded errors and encoded return value (b"" for none, or None) of a `complete`.

    For a record `check_decision` accepted: SUCCESSFUL or FAILED, and a
    return value the codec carries.
    """
    result = b""
    # None is stored as no result at all, which reads back the same.
    if record.status is TaskResultStatus.SUCCESSFUL and record.return_value is not None:
        result = codec.encode_value(record.return_value)
    return record.status.value, codec.encode_errors(record.errors), result


#: How a progress's codec bytes end when its ``updated_at`` is None: the last key's value.
_UNSTAMPED = b"null}"


def progress_head(progress: Progress) -> bytes:
    """`progress`'s codec bytes up to the value of ``updated_at``, its last key.

    ``record_progress.lua`` completes them with the server's time and ``}``,
    so the stored bytes are what `codec.dumps` writes for the progress
    stamped then, and `codec.loads` reads them back.
    """
    data = codec.dumps(attrs.evolve(progress, updated_at=None))
    if not data.endswith(b'"updated_at":' + _UNSTAMPED):  # never: the codec writes fields in order
        raise ValueError(f"unexpected progress encoding: {data!r}")
    return data[: -len(_UNSTAMPED)]


def partly_enqueued(
    chunks: Sequence[Sequence[Group]],
    stored: Sequence[list[TaskResult] | None],
    exc: RedisBackendError,
) -> PartlyEnqueued:
    """The error of a batch whose calls stored the chunks of `stored` not None, stopped by `exc`."""
    done: list[str] = []
    missing: list[str] = []
    positions: list[int] = []
    for chunk, records in zip(chunks, stored, strict=True):
        ids = [task_id for _base, calls in chunk for task_id, _args, _kwargs in calls]
        if records is None:
            positions.extend(range(len(done) + len(missing), len(done) + len(missing) + len(ids)))
        (done if records is not None else missing).extend(ids)
    kind = PartlyEnqueuedUnavailable if isinstance(exc, RedisUnavailable) else PartlyEnqueued
    return kind(
        f"enqueue stopped part way: {len(done)} of {len(done) + len(missing)} tasks were "
        f"stored, {len(missing)} were not (the error's not_stored and not_stored_indexes name "
        f"them): {exc}",
        done,
        missing,
        positions,
    )
