"""A finished task's outcome lands within moments, whatever the worker runs next: a real
`threadmill worker --threads 1` on real Redis.

The worker claims a quick task (`fault_tasks.work`) and a task that blocks
on its first attempt (`fault_tasks.hold`, retried once) behind it. While
the only thread runs the blocking task, the quick one must read SUCCESSFUL
within about a second, not when the blocking one ends: its outcome is sent
within the acknowledgement delay (10 ms, see README on ``--prefetch``). The
test then SIGKILLs the worker process: the blocking task is charged and
runs again, and the quick one, already acknowledged, never runs again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from tests.conftest import RedisServer
from tests.faults import fault_tasks
from tests.faults.runs import wait_until
from threadmill_core import Broker, TaskResultStatus
from threadmill_redis import RedisBackend
from threadmill_redis import testing as redis_testing

pytestmark = pytest.mark.redis

SUCCESSFUL, RUNNING = TaskResultStatus.SUCCESSFUL, TaskResultStatus.RUNNING
#: How soon after the blocking task starts the quick one must read SUCCESSFUL: the
#: acknowledgement delay is 10 ms; the rest is room for a loaded machine.
LANDS_WITHIN = 1.0


@pytest.fixture
def broker_url(redis_server: RedisServer, namespace: str) -> str:
    return f"{redis_server.url}?namespace={namespace}"


def test_an_outcome_lands_while_the_only_thread_runs_a_long_task_and_a_kill_keeps_it(
    broker: Broker,
    broker_url: str,
    log_url: str,
    namespace: str,
    read_events: Callable[[str], list[str]],
) -> None:
    """Regression: with one thread, the quick task's outcome waited for the end of the long task
    after it, so a kill meanwhile ran the quick task twice; now it lands within a second, and
    after the kill it is still SUCCESSFUL after one run."""
    quick = fault_tasks.work.using(broker=broker).enqueue(log_url, namespace, 0, 0)
    long = fault_tasks.hold.using(broker=broker).enqueue(log_url, namespace, 1)
    process = subprocess.Popen(
        [sys.executable, "-m", "threadmill_core.cli", "worker", fault_tasks.__name__,
         "--broker", broker_url, "--processes", "1", "--threads", "1",
         "--poll-interval", "0.1", "--log-level", "INFO"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        wait_until(
            lambda: any(e.startswith("start:1:") for e in read_events(namespace)),
            60,
            "the long task to start",
        )
        began = time.monotonic()
        wait_until(lambda: broker.get_result(quick.id).status is SUCCESSFUL, 10, "the outcome")
        landed = time.monotonic() - began
        assert broker.get_result(long.id).status is RUNNING
        assert landed < LANDS_WITHIN, landed
        # Killed once its start is recorded, the long task is charged and retried at once.
        assert isinstance(broker.backend, RedisBackend)
        wait_until(
            lambda: redis_testing.start_recorded(broker.backend, long.id),  # type: ignore[arg-type]  # checked above
            30,
            "the long task's start to be recorded",
        )
        [event] = [e for e in read_events(namespace) if e.startswith("start:1:")]
        os.kill(int(event.split(":")[2]), signal.SIGKILL)
        wait_until(lambda: broker.get_result(long.id).status is SUCCESSFUL, 60, "the retry")
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            output, _ = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == 0, output
    done = broker.get_result(quick.id)
    assert (done.status, done.attempts, done.errors, done.return_value) == (SUCCESSFUL, 1, (), 0)
    runs = [e for e in read_events(namespace) if e.startswith("start:0:")]
    assert len(runs) == 1, f"the quick task ran again: {read_events(namespace)}"
    assert broker.get_result(long.id).attempts == 2
