"""Cancelling a running task and reading its progress, in the in-process Worker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.core import stopped_tasks, tasks
from tests.core.running_checks import LEASE_TTL, Running, check_cancel_of_a_running_task
from tests.faults.runs import wait_until
from threadmill_core import Broker, TaskResultStatus, Worker
from threadmill_core.models import Progress

RUNNING, SUCCESSFUL = TaskResultStatus.RUNNING, TaskResultStatus.SUCCESSFUL


@pytest.fixture(autouse=True)
def _fresh_events() -> Iterator[None]:
    with stopped_tasks.events_lock:
        stopped_tasks.events.clear()
    stopped_tasks.gate.clear()
    stopped_tasks.reported.clear()
    yield
    stopped_tasks.gate.set()


def test_cancelling_a_running_task_stops_it_within_a_beat(broker: Broker) -> None:
    """A cancel of a RUNNING task is a request: the worker hears of it at its next heartbeat,
    raises TaskCancelled in the task (its finally runs, its context says so), and the task
    ends CANCELLED, never retried; the old lease's late acknowledgement is refused."""
    check_cancel_of_a_running_task(broker)


def test_a_task_that_ends_first_keeps_its_outcome(broker: Broker) -> None:
    """Cancelling a finished task is refused with the reason; its outcome stands."""
    record = stopped_tasks.neighbour.using(broker=broker).enqueue(0)
    Worker(broker, lease_ttl=LEASE_TTL).run(burst=True)
    assert broker.cancel(record.id) is None
    assert broker.get_result(record.id).status is SUCCESSFUL


def test_progress_is_readable_while_the_task_runs_and_after(broker: Broker) -> None:
    """Progress a task reports is stored with the next heartbeat (the last value wins),
    readable from get_result while it runs, and its last report is kept after it ends."""
    record = stopped_tasks.progressing.using(broker=broker).enqueue(3)
    running = Running(broker)
    try:
        assert stopped_tasks.reported.wait(10)
        wait_until(
            lambda: broker.get_result(record.id).progress is not None, 5, "progress to be stored"
        )
        during = broker.get_result(record.id)
        assert during.status is RUNNING
        progress = during.progress
        assert progress is not None
        assert (progress.done, progress.total, progress.message) == (2, 3, "step 2")
        assert progress.updated_at is not None
        stopped_tasks.gate.set()
        wait_until(lambda: broker.get_result(record.id).is_finished, 5, "the task to end")
    finally:
        running.stop()
    final = broker.get_result(record.id)
    assert final.status is SUCCESSFUL
    assert final.progress is not None
    assert (final.progress.done, final.progress.message) == (3, "all done")


@pytest.mark.parametrize(
    ("done", "total", "message", "problem"),
    [
        (5, 3, None, "more than its total"),
        (-1, None, None, "done"),
        (True, None, None, "done"),
        ("half", None, None, "done"),
        (1, 0, None, "total"),
        (float("nan"), None, None, "done"),
        (1, 2, "x" * 1_000_000, "1,000,000 characters"),
        (1, 2, ["not", "text"], "message"),
    ],
)
def test_bad_progress_is_refused_at_the_call(
    broker: Broker, done: object, total: object, message: object, problem: str
) -> None:
    """context.progress refuses bad input at once, naming the problem; nothing is stored."""
    record = stopped_tasks.reports.using(broker=broker).enqueue(done, total, message)
    Worker(broker, lease_ttl=LEASE_TTL).run(burst=True)
    final = broker.get_result(record.id)
    assert final.status is SUCCESSFUL
    assert isinstance(final.return_value, str)
    assert final.return_value.startswith("InvalidOption: ")
    assert problem in final.return_value
    assert final.progress is None


def test_a_progress_message_that_is_not_valid_unicode_is_stored_escaped(
    broker: Broker,
) -> None:
    """A progress message with a lone surrogate is kept with it escaped; the heartbeat and the
    task's outcome are stored as for any other report."""
    record = tasks.reports_undecodable_progress.using(broker=broker).enqueue()
    Worker(broker, lease_ttl=LEASE_TTL).run(burst=True)
    final = broker.get_result(record.id)
    assert (final.status, final.return_value) == (SUCCESSFUL, "read")
    assert final.progress is not None
    assert final.progress.message == "reading report-\\udcff.txt"


def test_progress_is_a_checked_record() -> None:
    """A Progress is checked as it is made, as context.progress checks it."""
    assert Progress(done=1, total=2, message="half").total == 2
    with pytest.raises(ValueError, match="more than its total"):
        Progress(done=3, total=2)
