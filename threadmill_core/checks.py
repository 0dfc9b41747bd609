"""The protocol's bad-argument rules, one function each, for every backend.

`threadmill_core.backend` says which calls a backend must refuse ("Bad
arguments" in its docstring): a `limit` that is not an int of at least 1, a
ttl that is not a positive `timedelta`, a bare str for a list of queues, a
decision no backend may apply, a record the codec cannot carry, and so on.
This module makes those checks. Every bundled backend calls them, and a
third-party backend should too, so that every backend refuses the same calls
with the same exception and the same words (the conformance kit in
`threadmill_core.testing` tries these calls on every backend).

How to use them: call the check first thing in the operation, before you
touch the store, so that a refused call changes nothing; for a batch, check
every item before you apply any (`check_records` and `check_calls` take the
whole batch; call `check_decision` on each decision first). Each check
either raises or returns the argument in the form the backend goes on with:

- `check_limit(limit)`, `check_offset(offset)`: the int, else `ValueError`
  (also for `True` and ``"1"``, which Python would compare with 1, and past
  `MAX_COUNT`, a trillion).
- `ttl_ms(name, ttl)`: a `lease_ttl` or `claim_ttl` in whole milliseconds,
  rounded up, else `ValueError` (also past `MAX_WAIT`, a thousand years);
  `check_delay(delay)`: a `release` delay likewise (zero allowed).
- `check_window(window)`: a `rates` window, else `ValueError`.
- `queue_names(queues)`: the queues as a list, each name once, in the order
  given; `TypeError` for a bare str.
- `check_purgeable(status)`: the `TaskResultStatus`; `ValueError` for
  RUNNING (see `PURGEABLE_STATUSES`).
- `check_records(records)`, `check_calls(template, calls)`: None, else
  `UnsupportedValue` naming the first field the codec cannot carry.
- `check_decision(decision)`: None, else `ValueError` (mismatched lease,
  non-terminal status, bad retry delay) or `UnsupportedValue` (a return
  value the codec cannot carry).
- `check_progress_updates(updates)`: the `record_progress` updates as a
  list, else `ValueError` (an item that is not a (`Lease`, `Progress`) pair).

The value checks underneath (`check_record`, `check_retry`, `check_value`:
what the codec carries) are `threadmill_core.values`', offered through
`threadmill_core.codec`. Every name here is also importable from
`threadmill_core.backend`, where it lived first, and stays so.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from threadmill_core.clock import duration_ms
from threadmill_core.headers import check_headers
from threadmill_core.models import (
    MAX_WAIT,
    TERMINAL_STATUSES,
    Decision,
    Lease,
    Progress,
    TaskCall,
    TaskResult,
    TaskResultStatus,
)
from threadmill_core.values import check_call, check_record, check_retry, check_task, check_value

__all__ = [
    "MAX_COUNT",
    "MAX_WAIT",
    "PURGEABLE_STATUSES",
    "check_calls",
    "check_decision",
    "check_delay",
    "check_limit",
    "check_offset",
    "check_progress_updates",
    "check_purgeable",
    "check_records",
    "check_window",
    "queue_names",
    "ttl_ms",
]

#: The segments `purge` may drop. RUNNING is not among them: a running task
#: is held by a worker, and only its lease decides it.
PURGEABLE_STATUSES = frozenset(TaskResultStatus) - {TaskResultStatus.RUNNING}


#: The largest `limit` or `offset` a backend takes: a trillion, past any store's records, and
#: small enough that every backend's arithmetic on it is exact (PostgreSQL's bigint, Lua's
#: doubles and the way Redis's scripts write them back as integers).
MAX_COUNT = 10**12


def check_limit(limit: object) -> int:
    """`limit` if it is an int from 1 to `MAX_COUNT`; else `ValueError` (also for `True` and
    ``"1"``)."""
    if type(limit) is not int or not 1 <= limit <= MAX_COUNT:
        raise ValueError(f"limit must be an int from 1 to {MAX_COUNT:,}, got {limit!r}")
    return limit


def check_offset(offset: object) -> int:
    """`offset` if it is an int from 0 to `MAX_COUNT`; else `ValueError`."""
    if type(offset) is not int or not 0 <= offset <= MAX_COUNT:
        raise ValueError(f"offset must be an int from 0 to {MAX_COUNT:,}, got {offset!r}")
    return offset


def ttl_ms(name: str, ttl: object) -> int:
    """A `lease_ttl` or `claim_ttl` (`name`) in whole milliseconds, rounded up.

    `ValueError` unless it is a positive `timedelta` (a number of seconds is refused
    too) of at most `MAX_WAIT`.
    """
    if not isinstance(ttl, timedelta) or ttl <= timedelta(0):
        raise ValueError(f"{name} must be a positive timedelta, got {ttl!r}")
    if ttl > MAX_WAIT:
        raise ValueError(f"{name} must be at most {MAX_WAIT.days:,} days, got {ttl!r}")
    return duration_ms(ttl)


def check_delay(delay: object, what: str = "release()") -> int:
    """A `release` (or `what`'s) delay in whole milliseconds, rounded up (0: the READY tail).

    `ValueError` unless it is a `timedelta` of zero or more, and at most `MAX_WAIT`.
    """
    if not isinstance(delay, timedelta) or delay < timedelta(0):
        raise ValueError(f"{what} needs a delay that is a timedelta of zero or more, got {delay!r}")
    if delay > MAX_WAIT:
        raise ValueError(f"{what} needs a delay of at most {MAX_WAIT.days:,} days, got {delay!r}")
    return duration_ms(delay)


def queue_names(queues: Sequence[str]) -> list[str]:
    """`queues` as a list, each name once, in the order given.

    `TypeError` for a bare str, which is a sequence of one-letter names.
    """
    if isinstance(queues, str):
        raise TypeError(
            f"queues must be a list of queue names (any sequence), not the str {queues!r}"
        )
    return list(dict.fromkeys(queues))


def check_purgeable(status: TaskResultStatus) -> TaskResultStatus:
    """`status` as a `TaskResultStatus` that `purge` may drop; `ValueError` for RUNNING."""
    status = TaskResultStatus(status)
    if status not in PURGEABLE_STATUSES:
        raise ValueError("RUNNING cannot be purged: a running task belongs to its lease holder")
    return status


def check_window(window: object) -> timedelta:
    """A `rates` window: `ValueError` unless it is a positive `timedelta`."""
    if not isinstance(window, timedelta) or window <= timedelta(0):
        raise ValueError(f"window must be a positive timedelta, got {window!r}")
    return window


def check_records(records: Sequence[TaskResult]) -> None:
    """Raise `UnsupportedValue` for the first record `enqueue` must refuse, naming the field.

    Each record's arguments, id, task path and queue (`codec.check_record`)
    and its retry policy (`codec.check_retry`; once per policy object, since
    the records of a batch usually share one). A record that passes encodes.
    """
    checked: object = None
    for record in records:
        check_record(record)
        if record.retry is not None and record.retry is not checked:
            check_retry(record.retry)
            checked = record.retry


def check_calls(template: TaskResult, calls: Sequence[TaskCall]) -> None:
    """Raise `UnsupportedValue` for the first call `enqueue_calls` must refuse, naming the field.

    What `check_records` would raise for the records the calls make, in the
    same order: each call's id and arguments (`codec.check_call`), and the
    template's task path, queue, headers and retry policy once, with the first call.
    """
    for index, (task_id, args, kwargs) in enumerate(calls):
        check_call(task_id, args, kwargs)
        if index == 0:
            check_task(template.task_path, template.queue)
            headers = template.headers
            if headers.__class__ is not dict or headers:
                check_headers(headers)
            check_retry(template.retry)


def check_decision(decision: Decision) -> None:
    """Raise for a decision no backend may apply (the protocol's "Bad arguments").

    `ValueError` for a mismatched lease, a non-terminal status or a retry
    delay that is not a `timedelta` of zero to `MAX_WAIT`; `UnsupportedValue` for a
    return value the codec cannot carry. A batch checks every decision
    before it applies any.
    """
    lease, record = decision.lease, decision.record
    if record.id != lease.task_id:
        raise ValueError(f"a decision on task {record.id} made with the lease of {lease.task_id}")
    if decision.retry_delay is None:
        if record.status not in TERMINAL_STATUSES:
            raise ValueError(
                "complete() finalizes as SUCCESSFUL, FAILED or CANCELLED,"
                f" not {record.status.value}"
            )
        if record.status is TaskResultStatus.SUCCESSFUL:
            check_value(record.return_value, "return_value")
    else:
        check_delay(decision.retry_delay, "retry()")


def check_progress_updates(
    updates: Sequence[tuple[Lease, Progress]],
) -> list[tuple[Lease, Progress]]:
    """`record_progress`'s updates as a list; `ValueError` for an item that is not a
    (`Lease`, `Progress`) pair (a `Progress` is valid when made: see `check_progress`)."""
    checked = list(updates)
    for item in checked:
        if (
            type(item) is not tuple
            or len(item) != 2
            or not isinstance(item[0], Lease)
            or not isinstance(item[1], Progress)
        ):
            raise ValueError(f"record_progress() takes (Lease, Progress) pairs, got {item!r}")
    return checked
