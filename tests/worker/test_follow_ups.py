"""Follow-up tasks: what a task enqueues without naming a broker goes to its worker's broker."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from tests.worker import recording_tasks
from threadmill_core import Broker, TaskResultStatus

pytestmark = pytest.mark.redis


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_a_task_enqueued_by_a_task_runs_on_the_workers_broker(
    broker: Broker,
    broker_url: str,
    namespace: str,
    read_events: Callable[[], list[str]],
    start: str,
) -> None:
    """`threadmill worker --broker redis://...` with THREADMILL_URL unset: a task that enqueues
    another without naming a broker sends it to the worker's Redis, where it runs."""
    url = broker_url.split("?")[0]
    first = recording_tasks.first_step.using(broker=broker).enqueue(url, namespace)
    env = {name: value for name, value in os.environ.items() if name != "THREADMILL_URL"}
    process = subprocess.run(
        [sys.executable, "-m", "threadmill_core.cli", "worker", recording_tasks.__name__,
         "--broker", broker_url, "--processes", "1", "--threads", "1", "--burst",
         "--poll-interval", "0.2", *(["--spawn"] if start == "spawn" else [])],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert process.returncode == 0, process.stderr
    step1 = broker.get_result(first.id)
    assert step1.status is TaskResultStatus.SUCCESSFUL, step1
    step2 = broker.get_result(step1.return_value)
    assert step2.status is TaskResultStatus.SUCCESSFUL, step2
    assert step2.task_path == recording_tasks.second_step.path
    assert [event.split(":")[:2] for event in read_events()] == [["start", "2"]]
    assert "MemoryBrokerWarning" not in process.stderr
