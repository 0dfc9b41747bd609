"""What `threadmill worker` logs last when it stops cleanly, run as a user runs it."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.worker.test_startup import THREADMILL, project, worker
from threadmill_core import Broker, TaskResult, TaskResultStatus
from threadmill_core.ids import new_task_id

pytestmark = pytest.mark.redis

__all__ = ["project"]  # the fixture, shared with test_startup


def plant(broker: Broker, count: int) -> list[str]:
    """`count` READY calls of myapp.tasks:add; their ids."""
    records = [
        TaskResult(id=new_task_id(), task_path="myapp.tasks:add", args=[n, 1]) for n in range(count)
    ]
    broker.backend.enqueue(records)
    return [r.id for r in records]


def test_a_burst_ends_with_a_line_saying_it_is_done_and_how_many_tasks_ran(
    project: Path, broker: Broker, broker_url: str
) -> None:
    """The last line of a burst says it is done, how many processes ran how many tasks, and
    the exit code; each worker process says how many it ran."""
    plant(broker, 3)
    done = worker(project, "myapp.tasks", "-b", broker_url, "-p", "2", "--burst")
    assert done.returncode == 0, done.stdout
    lines = done.stdout.splitlines()
    assert lines[-1].endswith(
        "INFO    MainProcess threadmill.supervisor: stopped (burst done: nothing left to run): "
        "2 worker process(es) ran 3 task(s) to an outcome, with 0 restart(s); exit code 0"
    ), lines[-1]
    each = [line for line in lines if "task(s) ran to an outcome" in line]
    assert len(each) == 2
    assert sum(int(line.split("stopped: ")[1].split()[0]) for line in each) == 3


def test_a_sigterm_ends_with_a_line_naming_it_and_how_many_tasks_ran(
    project: Path, broker: Broker, broker_url: str
) -> None:
    """A worker stopped by SIGTERM ends with one line naming the signal and counting the tasks
    its processes ran."""
    ids = plant(broker, 4)
    with subprocess.Popen(
        [THREADMILL, "worker", "myapp.tasks", "-b", broker_url, "-p", "1"],
        cwd=project, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    ) as running:  # fmt: skip
        deadline = time.monotonic() + 30
        while not all(broker.get_result(i).status is TaskResultStatus.SUCCESSFUL for i in ids):
            assert time.monotonic() < deadline, "the tasks did not run"
            time.sleep(0.05)
        running.send_signal(signal.SIGTERM)
        out, _ = running.communicate(timeout=60)
    assert running.returncode == 0, out
    assert out.splitlines()[-1].endswith(
        "stopped (SIGTERM): 1 worker process(es) ran 4 task(s) to an outcome, with 0 "
        "restart(s); exit code 0"
    ), out
