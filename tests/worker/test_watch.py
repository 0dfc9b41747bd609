"""A stop that lands in `Watch.leave`, driven line by line: no threads, no clock, no backend.

A stop is an asynchronous exception, raised at whatever bytecode the task
thread runs when it arrives. One sent while the task returns (the thread
waits for the `Watch`'s lock in `leave`) lands inside `leave` itself. Here a
trace function raises it at each line of `leave` in turn, standing in for
the interpreter, and the send is recorded rather than made; whatever the
line, the attempt ends as a stopped one and is watched no more, so the
heartbeat thread never takes its healthy thread for one stuck past its
hard limit (it would abandon it, decide the task a second time and replace
the process).
"""

from __future__ import annotations

import contextlib
import dis
import linecache
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from types import FrameType
from typing import Any

import pytest

from threadmill_core.errors import TimeLimitExceeded
from threadmill_core.models import Lease, TaskResult, TaskResultStatus
from threadmill_core.task import Task
from threadmill_core.worker import interrupts
from threadmill_core.worker.execution import call
from threadmill_core.worker.held import HeldTask
from threadmill_core.worker.interrupts import Attempt, Stop, Watch

LIMIT_PATH = f"{TimeLimitExceeded.__module__}.{TimeLimitExceeded.__qualname__}"
FOREVER = float("inf")

Tracer = Callable[[FrameType, str, Any], Any]


def _lines_of_leave() -> list[Any]:
    """The lines of `Watch.leave`'s body, in order (its ``def`` line left out), named by
    their source."""
    code = Watch.leave.__code__
    starts = {line for _, line in dis.findlinestarts(code) if line is not None}
    return [
        pytest.param(line, id=linecache.getline(code.co_filename, line).strip())
        for line in sorted(starts - {code.co_firstlineno})
    ]


def _landing_at(line: int, landed: list[int]) -> Tracer:
    """A trace function that raises the stop as the first run of `line` of `Watch.leave`
    begins (once, noted in `landed`): where an asynchronous exception sent meanwhile would
    land."""
    code = Watch.leave.__code__

    def in_leave(frame: FrameType, event: str, arg: Any) -> Tracer | None:
        if event == "line" and frame.f_lineno == line and not landed:
            landed.append(line)
            raise TimeLimitExceeded
        return in_leave

    def calls(frame: FrameType, event: str, arg: Any) -> Tracer | None:
        return in_leave if frame.f_code is code and not landed else None

    return calls


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[type[BaseException] | None]:
    """What `Watch` sends to the task thread, this test's (None: a withdrawal), recorded,
    not sent. The module's sender is replaced for every thread, so a send from a worker
    some earlier test left winding down is swallowed too, unrecorded (forwarding those
    for real once left this test spinning in CI's full run)."""
    made: list[type[BaseException] | None] = []
    this_thread = threading.get_ident()

    def record(thread_id: int, exc: type[BaseException] | None) -> int:
        if thread_id == this_thread:
            made.append(exc)
        return 1

    monkeypatch.setattr(interrupts, "_set_async_exc", record)
    return made


@contextlib.contextmanager
def traced(tracer: Tracer) -> Iterator[None]:
    """`tracer` traces this thread within the block."""
    before = sys.gettrace()
    sys.settrace(tracer)
    try:
        yield
    finally:
        sys.settrace(before)


def _attempt() -> Attempt:
    record = TaskResult(
        id="t1", task_path="tests.worker.test_watch:returns", status=TaskResultStatus.RUNNING,
        attempts=1,
    )  # fmt: skip
    lease = Lease(token="token-1", deadline=datetime(2030, 1, 1, tzinfo=UTC), record=record)
    return Attempt(HeldTask(lease, timedelta(seconds=30)), timedelta(minutes=1), grace=0.5)


def _told_to_stop_as_it_returns(watch: Watch, attempt: Attempt) -> Task[[], str]:
    """A task that the heartbeat thread tells to stop just before it returns."""

    def returns() -> str:
        assert watch.stop(attempt, Stop.TIME_LIMIT)
        return "done"

    return Task(func=returns, path="tests.worker.test_watch:returns")


@pytest.mark.parametrize("line", _lines_of_leave())
def test_a_stop_landing_at_any_line_of_leave_ends_the_attempt_stopped_and_unwatched(
    line: int, sent: list[type[BaseException] | None]
) -> None:
    """Wherever in `leave` the stop lands, the attempt is recorded as stopped by its time
    limit, has left its task's code, and is past no hard limit, however long one waits."""
    watch = Watch(wake=threading.Event())
    attempt = _attempt()
    task = _told_to_stop_as_it_returns(watch, attempt)
    landed: list[int] = []
    with traced(_landing_at(line, landed)):
        decision = call(task, attempt.held.lease, None, attempt=attempt, watch=watch)
    assert landed == [line]
    assert sent[0] is TimeLimitExceeded
    assert decision.record.status is TaskResultStatus.FAILED
    assert decision.record.errors[-1].exception_class_path == LIMIT_PATH
    assert not attempt.in_task
    assert watch.due(FOREVER) == ([], FOREVER)
    assert not attempt.abandoned


def test_a_stop_sent_as_the_task_returns_and_withdrawn_in_leave_keeps_its_outcome(
    sent: list[type[BaseException] | None],
) -> None:
    """A stop sent as the task returns that has not landed when `leave` takes the lock is
    withdrawn there: the task's own outcome stands, and nothing stays watched."""
    watch = Watch(wake=threading.Event())
    attempt = _attempt()
    task = _told_to_stop_as_it_returns(watch, attempt)
    decision = call(task, attempt.held.lease, None, attempt=attempt, watch=watch)
    assert sent == [TimeLimitExceeded, None]
    assert (decision.record.status, decision.record.return_value) == (
        TaskResultStatus.SUCCESSFUL, "done",
    )  # fmt: skip
    assert watch.due(FOREVER) == ([], FOREVER)
