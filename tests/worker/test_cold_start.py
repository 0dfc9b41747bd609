"""What `threadmill worker` loads before its first task runs: what running tasks needs, no more.

Every module imported before the first task is start-up time a user waits
through (issue 20's cold start); these tests pin that the worker command
leaves alone what it never uses, as a user runs it (the console script).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from threadmill_core import Broker, TaskResult, TaskResultStatus
from threadmill_core.ids import new_task_id

pytestmark = pytest.mark.redis

THREADMILL = str(Path(sys.executable).with_name("threadmill"))

#: A task that answers the modules loaded in the worker process that runs it.
PROBE = """\
import sys

from threadmill_core import task

@task
def loaded():
    return sorted(sys.modules)
"""

#: What a worker on a Redis URL never uses: the inspecting commands and their
#: terminal UI, the demo, and the backends its URL does not name.
NOT_FOR_A_REDIS_WORKER = (
    "threadmill_core.cli.inspector",
    "threadmill_core.cli.tui",
    "threadmill_core.cli.demo",
    "threadmill_memory.backend",
    "threadmill_postgres.backend",
    "textual",
    "psycopg",
)


def test_a_worker_runs_its_first_task_without_what_it_does_not_use(
    tmp_path: Path, broker: Broker, broker_url: str
) -> None:
    """The first task's process has the Redis backend loaded, and none of the modules above."""
    (tmp_path / "probe_tasks.py").write_text(PROBE)
    planted = TaskResult(id=new_task_id(), task_path="probe_tasks:loaded")
    broker.backend.enqueue([planted])
    done = subprocess.run(
        [THREADMILL, "worker", "probe_tasks", "-b", broker_url, "-p", "1", "-t", "1", "--burst"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout
    final = broker.get_result(planted.id)
    assert final.status is TaskResultStatus.SUCCESSFUL, final.errors
    loaded = set(final.return_value)
    assert {"threadmill_core.worker.supervisor", "threadmill_redis.backend"} <= loaded
    unused = sorted(
        name
        for name in loaded
        for prefix in NOT_FOR_A_REDIS_WORKER
        if name == prefix or name.startswith(prefix + ".")
    )
    assert unused == []
