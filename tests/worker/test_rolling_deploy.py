"""A rolling deploy: a task enqueued before any worker loads it waits for one that does."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from tests.faults.runs import wait_until
from tests.worker import deployed_tasks, recording_tasks
from threadmill_core import Broker, TaskResultStatus

pytestmark = pytest.mark.redis


def start_cli(broker_url: str, module: str) -> subprocess.Popen[str]:
    """`threadmill worker MODULE` with a short poll interval."""
    return subprocess.Popen(
        [sys.executable, "-m", "threadmill_core.cli", "worker", module, "--broker", broker_url,
         "--processes", "1", "--threads", "2", "--lease-ttl", "2", "--poll-interval", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )  # fmt: skip


def stop(process: subprocess.Popen[str]) -> str:
    """A graceful stop (SIGTERM); its output."""
    try:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            output, _ = process.communicate()
    assert process.returncode == 0, output
    return output


def test_a_task_no_worker_knows_yet_waits_uncharged_and_runs_once_one_does(
    broker: Broker, broker_url: str, namespace: str, read_events: Callable[[], list[str]]
) -> None:
    """Enqueued before the deploy, the task is given back by the old worker (not FAILED, not
    charged) for as long as it runs alone; a new worker started beside it runs the task."""
    url = broker_url.split("?")[0]
    added = deployed_tasks.added_in_the_deploy.using(broker=broker)
    record = added.enqueue(url, namespace)
    old = start_cli(broker_url, recording_tasks.__name__)
    new = None
    try:
        wait_until(
            lambda: broker.get_result(record.id).status is TaskResultStatus.DEFERRED,
            30,
            "the old worker to give the task back",
        )
        settle = time.monotonic() + 3
        while time.monotonic() < settle:  # the old worker alone, a while: waiting, uncharged
            waiting = broker.get_result(record.id)
            assert waiting.status in {TaskResultStatus.DEFERRED, TaskResultStatus.READY,
                                      TaskResultStatus.RUNNING}, waiting  # fmt: skip
            assert (waiting.errors, waiting.attempts in (0, 1)) == ((), True), waiting
            time.sleep(0.1)
        new = start_cli(broker_url, deployed_tasks.__name__)
        wait_until(lambda: broker.get_result(record.id).is_finished, 60, "the new worker to run it")
    finally:
        old_output = stop(old)
        if new is not None:
            stop(new)
    final = broker.get_result(record.id)
    assert (final.status, final.attempts, final.errors) == (TaskResultStatus.SUCCESSFUL, 1, ())
    assert len(final.worker_ids) == 1
    assert [event.split(":")[:2] for event in read_events()] == [["start", "3"]]
    assert "is not registered here: given back for another worker" in old_output
