"""`WorkerSettings.setup`: every process is prepared before it imports the task modules."""

from __future__ import annotations

import functools
import os
import threading
from datetime import timedelta

import pytest

from tests.worker import prepared_tasks, process_setup
from threadmill_core import Broker, InvalidOption, TaskResultStatus
from threadmill_core.worker.supervisor import EXIT_CONFIG_ERROR, Supervisor, WorkerSettings

pytestmark = pytest.mark.redis

MODULE = "tests.worker.prepared_tasks"


def settings(broker_url: str, **changes: object) -> WorkerSettings:
    options: dict[str, object] = {
        "broker_url": broker_url,
        "modules": (MODULE,),
        "processes": 2,
        "threads": 1,
        "poll_interval": timedelta(milliseconds=100),
        "burst": True,
        "log_level": "WARNING",
        **changes,
    }
    return WorkerSettings(**options)  # type: ignore[arg-type]


def run(supervisor: Supervisor) -> int:
    codes: list[int] = []
    runner = threading.Thread(target=lambda: codes.append(supervisor.run()))
    runner.start()
    runner.join(timeout=120)
    if runner.is_alive():
        supervisor.request_stop()
        runner.join(timeout=60)
        pytest.fail("the supervisor did not finish its burst")
    return codes[0]


def test_each_worker_process_runs_the_setup_before_importing_tasks(
    broker: Broker, broker_url: str
) -> None:
    """Tasks run in spawned processes whose setup ran before the task module was imported."""
    work = prepared_tasks.report.using(broker=broker)
    records = broker.enqueue_many(work, [((), {}) for _ in range(20)])
    setup = functools.partial(process_setup.prepare, "prepared")
    assert run(Supervisor(settings(broker_url, setup=setup))) == 0
    finals = [broker.get_result(r.id) for r in records]
    assert {f.status for f in finals} == {TaskResultStatus.SUCCESSFUL}
    assert {f.return_value[0] for f in finals} == {"prepared"}
    assert os.getpid() not in {f.return_value[1] for f in finals}
    # The supervisor's own process ran the setup too (its reaper loads the modules).
    assert process_setup.STATE["marker"] == "prepared"


def test_a_worker_process_whose_setup_fails_stops_the_supervisor(
    broker: Broker, broker_url: str
) -> None:
    """A setup that raises in a worker process is a configuration error: exit code 3."""
    record = prepared_tasks.report.using(broker=broker).enqueue()
    setup = functools.partial(process_setup.fail_outside, os.getpid())
    assert run(Supervisor(settings(broker_url, setup=setup))) == EXIT_CONFIG_ERROR
    assert broker.get_result(record.id).status is TaskResultStatus.READY  # nothing ran


def test_a_setup_that_fails_in_the_supervisor_starts_nothing(broker_url: str) -> None:
    """The supervisor prepares itself first; a failure there spawns no process."""
    setup = functools.partial(process_setup.fail_outside, -1)
    supervisor = Supervisor(settings(broker_url, setup=setup))
    assert run(supervisor) == EXIT_CONFIG_ERROR
    assert supervisor.pids() == []


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda: None, "cannot be sent to a spawned worker process"),
        (functools.partial(process_setup.prepare, threading.Lock()), "cannot be sent"),
        ("tests.worker.process_setup:prepare", "must be a callable"),
    ],
)
def test_a_setup_a_worker_process_could_not_receive_is_refused(
    broker_url: str, setup: object, message: str
) -> None:
    """Setup travels to spawned processes by pickle, so it is checked when the settings are made."""
    with pytest.raises(InvalidOption, match=message):
        settings(broker_url, setup=setup)
