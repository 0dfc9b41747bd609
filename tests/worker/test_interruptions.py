"""The default retry policy on real worker processes: an interruption is retried, a failure not."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable

import pytest

from tests.faults.runs import wait_until
from tests.worker import recording_tasks
from threadmill_core import Broker, TaskResultStatus
from threadmill_core.worker.supervisor import EXIT_ABANDONED
from threadmill_redis import RedisBackend
from threadmill_redis.testing import start_recorded

pytestmark = pytest.mark.redis

ACK_TIMEOUT = "threadmill_core.errors.AcknowledgementTimeout"


def start_cli(broker_url: str) -> subprocess.Popen[str]:
    """`threadmill worker` on the recording tasks, with a 1 s lease and a quick pace."""
    return subprocess.Popen(
        [sys.executable, "-m", "threadmill_core.cli", "worker", recording_tasks.__name__,
         "--broker", broker_url, "--processes", "1", "--threads", "2", "--lease-ttl", "1",
         "--poll-interval", "0.2", "--shutdown-timeout", "5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )  # fmt: skip


def stop(process: subprocess.Popen[str], signals: int) -> tuple[int, str]:
    """Send `signals` SIGTERMs (two: stop at once); its exit code and output."""
    try:
        for _ in range(signals):
            process.send_signal(signal.SIGTERM)
            time.sleep(0.3)  # let one signal land before the next
        output, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return process.returncode, output


def test_a_task_stopped_hard_mid_run_succeeds_on_the_next_worker_under_the_default_policy(
    broker: Broker, broker_url: str, read_events: Callable[[], list[str]], namespace: str
) -> None:
    """A worker stopped hard (two SIGTERMs) mid-task leaves it to be retried, and the next
    worker runs it to SUCCESSFUL with the AcknowledgementTimeout kept; a task that raised its
    own exception beside it stays FAILED after one attempt."""
    url = broker_url.split("?")[0]
    backend = broker.backend
    assert isinstance(backend, RedisBackend)
    interrupted = recording_tasks.interrupted_once.using(broker=broker).enqueue(url, namespace, 60)
    refused = recording_tasks.refuses.using(broker=broker).enqueue(url, namespace)
    process = start_cli(broker_url)
    try:
        wait_until(lambda: start_recorded(backend, interrupted.id), 60, "its start to be recorded")
        wait_until(lambda: broker.get_result(refused.id).is_finished, 30, "the refusal")
    finally:
        code, output = stop(process, signals=2)
    assert code == EXIT_ABANDONED, output
    assert broker.get_result(interrupted.id).status is TaskResultStatus.RUNNING

    process = start_cli(broker_url)
    try:
        wait_until(lambda: broker.get_result(interrupted.id).is_finished, 30, "the retry to run")
    finally:
        code, output = stop(process, signals=1)
    assert code == 0, output
    final = broker.get_result(interrupted.id)
    assert (final.status, final.attempts, final.return_value) == (
        TaskResultStatus.SUCCESSFUL, 2, 2,
    )  # fmt: skip
    assert [error.exception_class_path for error in final.errors] == [ACK_TIMEOUT]
    failed = broker.get_result(refused.id)
    assert (failed.status, failed.attempts) == (TaskResultStatus.FAILED, 1)
    assert [error.exception_class_path for error in failed.errors] == ["builtins.ValueError"]
    events = [event.split(":") for event in read_events()]
    starts = Counter((kind, n) for kind, n, _pid, _attempt in events if kind == "start")
    assert starts == {("start", "0"): 2, ("start", "1"): 1}, "each run once more at most"
    assert [(n, attempt) for kind, n, _pid, attempt in events if kind == "end"] == [("0", "2")]
