"""A task past its hard limit under the supervisor, on a real Redis: its process is replaced."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from tests.core import stopped_tasks
from tests.faults.runs import wait_until
from threadmill_core import Broker, TaskResultStatus
from threadmill_core.worker.supervisor import Supervisor, WorkerSettings

pytestmark = pytest.mark.redis

LIMIT_PATH = "threadmill_core.errors.TimeLimitExceeded"


@pytest.mark.slow
def test_a_task_stuck_in_c_is_recorded_and_its_process_replaced(
    broker: Broker, broker_url: str
) -> None:
    """A task in time.sleep(600) with time_limit=1 is recorded FAILED with TimeLimitExceeded
    within its limit and grace; the neighbour running in the same process ends SUCCESSFUL
    uncharged, the process exits to be replaced, and the fresh one serves the next task."""
    sleeps = stopped_tasks.sleeps.using(broker=broker).enqueue()
    neighbour = stopped_tasks.neighbour.using(broker=broker).enqueue(2.5)
    settings = WorkerSettings(
        broker_url=broker_url,
        modules=("tests.core.stopped_tasks",),
        processes=1,
        threads=2,
        prefetch=0,
        lease_ttl=timedelta(seconds=3),
        time_limit_grace=timedelta(seconds=0.5),
        poll_interval=timedelta(milliseconds=100),
        log_level="WARNING",
    )
    supervisor = Supervisor(settings)
    runner = threading.Thread(target=supervisor.run)
    runner.start()
    try:
        stuck = broker.wait(sleeps.id, timeout=30)
        wait_until(lambda: supervisor.restarts >= 1, 30, "the process to be replaced")
        later = stopped_tasks.neighbour.using(broker=broker).enqueue(0)
        served = broker.wait(later.id, timeout=60)
        beside = broker.wait(neighbour.id, timeout=30)
    finally:
        supervisor.request_stop()
        runner.join(timeout=60)
    assert stuck.status is TaskResultStatus.FAILED
    assert stuck.errors[-1].exception_class_path == LIMIT_PATH
    assert stuck.started_at is not None
    assert stuck.finished_at is not None
    assert (stuck.finished_at - stuck.started_at).total_seconds() < 1 + 0.5 + 1
    assert (beside.status, beside.errors, beside.attempts) == (
        TaskResultStatus.SUCCESSFUL, (), 1,
    )  # fmt: skip
    assert served.status is TaskResultStatus.SUCCESSFUL
