"""`threadmill worker --burst`, run as a user runs it: what it waits for before it exits."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from threadmill_core import Broker, ExponentialBackoff, TaskResult, TaskResultStatus
from threadmill_core.ids import new_task_id
from threadmill_core.retry import policy_spec

pytestmark = pytest.mark.redis

THREADMILL = str(Path(sys.executable).with_name("threadmill"))

#: A task that fails its first attempt, saying when (the test enqueues it with a retry after
#: 0.1 s), and one to defer for an hour.
FLAKY = """\
import time
from datetime import timedelta
from threadmill_core import ExponentialBackoff, task

@task(retry=ExponentialBackoff(base_delay=timedelta(milliseconds=100), max_retries=1, jitter=0))
def flaky(context):
    if context.attempt == 1:
        raise RuntimeError(repr(time.time()))
    return time.time()

@task
def later():
    return None
"""


@pytest.mark.parametrize(
    "options",
    [(), ("--max-tasks", "1")],
    ids=["the-worker-waits", "the-supervisor-promotes"],
)
def test_a_burst_runs_a_retry_due_soon_on_time_and_still_exits(
    tmp_path: Path, broker: Broker, broker_url: str, options: tuple[str, ...]
) -> None:
    """A retry due 0.1 s after its failure runs about then, not at the reaper's turn a third of
    a lease later; a task deferred for an hour does not keep the burst from exiting. With
    ``--max-tasks 1`` the worker process exits after the failure, and the supervisor promotes
    the retry when it falls due and starts a worker for it."""
    (tmp_path / "burstapp.py").write_text(FLAKY)
    quick = ExponentialBackoff(base_delay=timedelta(milliseconds=100), max_retries=1, jitter=0)
    flaky = TaskResult(id=new_task_id(), task_path="burstapp:flaky", retry=policy_spec(quick))
    far = TaskResult(
        id=new_task_id(),
        task_path="burstapp:later",
        run_after=datetime.now(UTC) + timedelta(hours=1),
    )
    broker.backend.enqueue([flaky, far])
    started = time.monotonic()
    done = subprocess.run(
        [THREADMILL, "worker", "burstapp", "-b", broker_url, "-p", "1", "--burst",
         "--lease-ttl", "30", *options],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60,
    )  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode == 0, done.stdout
    final = broker.get_result(flaky.id)
    assert final.status is TaskResultStatus.SUCCESSFUL, final.errors
    failed_at = float(final.errors[0].message)
    assert isinstance(final.return_value, float)
    late = final.return_value - failed_at
    # The reaper's turn came 10 s (lease TTL / 3) after the failure.
    assert 0.1 <= late < 5.0, f"the retry ran {late:.2f} s after its failure"
    assert broker.get_result(far.id).status is TaskResultStatus.DEFERRED
    assert took < 20, f"the burst took {took:.1f} s to exit"
