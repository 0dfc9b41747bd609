"""Every inspecting command, run as a user runs it (a subprocess), against PostgreSQL.

The same fleet as the Redis run of these commands (tests/inspector): tasks
in every segment of two queues, made by a real worker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

from tests.conftest import PostgresDatabase
from tests.inspector.conftest import Fleet, make_fleet, stored
from threadmill_core import Broker, TaskResultStatus, connect
from threadmill_postgres.testing import drop_namespace, new_namespace

pytestmark = pytest.mark.postgres

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def url(postgres_database: PostgresDatabase) -> str:
    return f"{postgres_database.url}?namespace={new_namespace('inspect')}"


@pytest.fixture
def broker(url: str) -> Iterator[Broker]:
    made = connect(url)
    try:
        yield made
    finally:
        drop_namespace(made.backend)  # type: ignore[arg-type]


@pytest.fixture
def fleet(broker: Broker) -> Fleet:
    return make_fleet(broker)


@pytest.fixture
def threadmill(url: str) -> Run:
    """Runs ``threadmill ARGS... --broker URL`` in a new process; `stdin` is what is typed."""
    env = {k: v for k, v in os.environ.items() if k != "THREADMILL_URL"}

    def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "threadmill_core.cli", *args, "--broker", url],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=env,
        )

    return run


def row(out: str, queue: str) -> list[str]:
    return next(line.split() for line in out.splitlines() if line.startswith(queue))


def test_stats_ls_and_show_read_what_postgres_holds(fleet: Fleet, threadmill: Run) -> None:
    """stats counts every segment with the rates the statements counted; ls and show read."""
    ran = threadmill("stats")
    assert ran.returncode == 0, ran.stderr
    assert row(ran.stdout, "emails") == ["emails", "1", "1", "1", "3", "0", "0", "0.10", "0.05"]
    assert row(ran.stdout, "reports") == ["reports", "0", "0", "0", "0", "2", "0", "0.03", "0.03"]
    data = json.loads(threadmill("stats", "--json", "--window", "600").stdout)
    assert data["rates_known"] is True
    assert {q["queue"]: (q["failed"], q["entered"], q["finished"]) for q in data["queues"]} == {
        "emails": (0, 6, 3),
        "reports": (2, 2, 2),
    }

    ran = threadmill("ls", "reports", "--status", "FAILED")
    assert ran.returncode == 0, ran.stderr
    assert [line.split()[0] for line in ran.stdout.splitlines()[1:3]] == fleet.failed

    ran = threadmill("show", fleet.failed[1])
    assert ran.returncode == 0, ran.stderr
    assert "ValueError: invalid literal for int() with base 10: '12x'" in ran.stdout
    ran = threadmill("show", "01900000-0000-7000-8000-000000000000")
    assert ran.returncode == 3
    assert "no task with id" in ran.stderr


def test_requeue_cancel_and_purge_act_and_refuse_as_the_protocol_says(
    fleet: Fleet, threadmill: Run, broker: Broker
) -> None:
    """requeue and cancel act where allowed and refuse the rest; purge deletes when confirmed."""
    ran = threadmill("requeue", fleet.failed[0], *fleet.running)
    assert ran.returncode == 1, ran.stderr
    assert f"refused    {fleet.running[0]}  it is RUNNING" in ran.stdout
    assert stored(broker, fleet.failed[0]).status is TaskResultStatus.READY
    ran = threadmill("requeue", "--failed", "reports", "--json")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["done"] == [{"id": fleet.failed[1], "status": "READY"}]

    ran = threadmill("cancel", *fleet.ready, *fleet.deferred, fleet.successful[0])
    assert ran.returncode == 1, ran.stderr
    assert broker.counts()["emails"].cancelled == 2

    ran = threadmill("purge", "emails", "--status", "successful", stdin="no\n")
    assert ran.returncode == 3
    assert broker.counts()["emails"].successful == 3
    ran = threadmill("purge", "emails", "--status", "successful", "--yes")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "purged 3 SUCCESSFUL task(s) from queue 'emails'"
