"""A process that uses the PostgreSQL backend and never closes it still exits at once."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import PostgresDatabase
from threadmill_core import connect
from threadmill_postgres.testing import drop_namespace, new_namespace

pytestmark = pytest.mark.postgres

#: Seconds a producer may take, start to exit. It takes well under one; on
#: Python 3.13 a forgotten pool used to take twenty (five per pool thread).
EXIT_BOUND = 5.0

TASKS = """
from threadmill_core import task

@task
def add(x):
    return x
"""

#: The producer: enqueue one task and return, closing nothing and keeping the broker to the end.
PRODUCER = """
import sys
from threadmill_core import connect
from producer_tasks import add
broker = connect(sys.argv[1])
print(add.using(broker=broker).enqueue(5).id)
"""


def test_a_producer_that_enqueues_and_exits_exits_at_once(
    database: PostgresDatabase, tmp_path: Path
) -> None:
    """A script that enqueues on PostgreSQL and returns, closing nothing, exits within seconds."""
    (tmp_path / "producer_tasks.py").write_text(TASKS)
    url = f"{database.url}?namespace={new_namespace('exit')}"
    broker = connect(url)
    try:
        started = time.monotonic()
        ran = subprocess.run(
            [sys.executable, "-c", PRODUCER, url],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,  # generous: a hang fails here rather than waiting forever
            check=False,
        )
        took = time.monotonic() - started
        assert ran.returncode == 0, ran.stderr
        assert "couldn't stop thread" not in ran.stderr, ran.stderr
        assert took < EXIT_BOUND, f"the producer took {took:.1f} s to exit:\n{ran.stderr}"
        assert broker.get_result(ran.stdout.strip()).args == [5], "the task was stored"
    finally:
        drop_namespace(broker.backend)  # type: ignore[arg-type]
