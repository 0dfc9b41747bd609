"""What the scripts are sent: core models as the ARGV of ``lua/*.lua``.

The caller has checked its arguments already (`threadmill_core.backend`'s
checks), so a refused call never gets here; these only encode.
`threadmill_redis.replies` is the other direction.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from threadmill_core import codec
from threadmill_core.clock import to_ms
from threadmill_core.errors import UnsupportedValue
from threadmill_core.models import TaskResult, TaskResultStatus


def payload(record: TaskResult) -> bytes:
    """The payload ``enqueue.lua`` stores for a checked record: what never changes, encoded.

    That is the id, function, arguments, queue, priority and retry policy
    (`codec.encode_enqueued`); the fields that change, and `run_after`, are
    kept beside it by the scripts, whatever the caller set.
    """
    try:
        return codec.encode_enqueued(record)
    except (TypeError, ValueError) as exc:  # never for a checked record: a codec bug
        reason = f"cannot be encoded: {exc}"
        raise UnsupportedValue(f"task {record.id!r}", record, reason=reason) from exc


def enqueue_runs(records: Sequence[TaskResult], notify_index: Mapping[str, int]) -> list[Any]:
    """``enqueue.lua``'s ARGV after ``notify_cap``: `records` in runs, as its header says.

    Consecutive records that share queue, priority and `run_after` (in whole
    ms; the calls of one `Broker.enqueue_many` all do) make one run, headed
    by what they share and the KEYS index of their queue's notify list
    (`notify_index`), then each record's id and payload.
    """
    args: list[Any] = []

    def shared(record: TaskResult) -> tuple[str, int, int | None]:
        run_after = None if record.run_after is None else to_ms(record.run_after)
        return record.queue, record.priority, run_after

    for (queue, priority, run_after), run in itertools.groupby(records, key=shared):
        pairs = [(record.id, payload(record)) for record in run]
        args += [len(pairs), queue, priority, "" if run_after is None else run_after]
        args.append(notify_index[queue])
        args += itertools.chain.from_iterable(pairs)
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
