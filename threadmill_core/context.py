"""`TaskContext`: what a running task, and a retry policy, may know about the attempt.

Made by the worker for a task that asks for one (a first parameter named
``context``), and for a retry policy deciding a failure. Besides the record,
the attempt number and the token, it carries what the worker learns while
the task runs (a lost lease, a cancel request) and what the task reports
(`TaskContext.progress`).
"""

from __future__ import annotations

import attrs

from threadmill_core.models import Progress, TaskError, TaskResult


class _Flag:
    """A bool that one thread sets and others read (an attribute write is atomic)."""

    __slots__ = ("up",)

    def __init__(self) -> None:
        self.up = False


@attrs.frozen(kw_only=True)
class TaskContext:
    """What a running task, and a retry policy, may know about the attempt.

    A task asks for it by declaring a first parameter named ``context``
    (see `threadmill_core.task`). `token` lets task code fence its own writes
    downstream: a write tagged with an older token is from a superseded attempt.
    """

    record: TaskResult
    #: 1 for the first claim, 2 for the second, ...
    attempt: int
    #: The failure being decided, for a retry policy; None while the task runs.
    last_error: TaskError | None = None
    token: str | None = None
    #: Set by `mark_lease_lost`. A plain flag, not a `threading.Event`: one
    #: context is made per task run, and an Event costs a lock and a condition.
    _lease_lost: _Flag = attrs.field(factory=_Flag, init=False, eq=False, repr=False)
    #: Set by `mark_cancel_requested`; `_progress` holds what `progress` reported last.
    _cancel: _Flag = attrs.field(factory=_Flag, init=False, eq=False, repr=False)
    _progress: list[Progress | None] = attrs.field(factory=list, init=False, eq=False, repr=False)

    @property
    def cancel_requested(self) -> bool:
        """True once the worker heard of a cancel request (`TaskCancelled` is raised too)."""
        return self._cancel.up

    def mark_cancel_requested(self) -> None:
        """Called by the worker when a heartbeat hears of a cancel request; never by task code."""
        self._cancel.up = True

    def progress(
        self, done: int | float, total: int | float | None = None, message: str | None = None
    ) -> None:
        """Report how far the task got, checked at once (`check_progress`); the worker stores
        the last one reported with its next heartbeat (see `TaskResult.progress`)."""
        self._progress[:1] = [Progress(done=done, total=total, message=message)]

    @property
    def reported_progress(self) -> Progress | None:
        """The last progress reported (`progress`), sent or not; None if none was."""
        return self._progress[0] if self._progress else None

    @property
    def lease_lost(self) -> bool:
        """True once the worker learned that this attempt's lease was taken away.

        The task's outcome will not be written; a long task may check this and stop early.
        """
        return self._lease_lost.up

    def mark_lease_lost(self) -> None:
        """Called by the worker when a heartbeat is refused; never by task code."""
        self._lease_lost.up = True
