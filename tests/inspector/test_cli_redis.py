"""The inspecting commands run as a user runs them, in a subprocess, against a real Redis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator

import pytest

from tests.conftest import RedisServer
from tests.inspector.conftest import Fleet, make_fleet, shared_start, stored
from threadmill_core import Broker, TaskResultStatus, connect

pytestmark = pytest.mark.redis

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def url(redis_server: RedisServer) -> str:
    return f"{redis_server.url}?namespace=inspect-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def broker(url: str) -> Iterator[Broker]:
    with connect(url) as made:
        yield made


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


def test_stats_and_ls_show_what_redis_holds(fleet: Fleet, threadmill: Run) -> None:
    """stats counts every segment, with the rates Redis counted; ls lists one segment."""
    ran = threadmill("stats")
    assert ran.returncode == 0, ran.stderr
    # emails: 6 entered, 3 finished; reports: 2 entered, 2 finished, over the last minute.
    assert row(ran.stdout, "emails") == ["emails", "1", "1", "1", "3", "0", "0", "0.10", "0.05"]
    assert row(ran.stdout, "reports") == ["reports", "0", "0", "0", "0", "2", "0", "0.03", "0.03"]
    assert row(ran.stdout, "total")[-2:] == ["0.13", "0.08"]
    assert "in/s, out/s: tasks entering and finishing per second over the last 1 min" in ran.stdout

    data = json.loads(threadmill("stats", "--json", "--window", "600").stdout)
    assert data["rates_known"] is True
    assert {q["queue"]: (q["failed"], q["entered"], q["finished"]) for q in data["queues"]} == {
        "emails": (0, 6, 3),
        "reports": (2, 2, 2),
    }

    ran = threadmill("ls", "reports", "--status", "FAILED")
    assert ran.returncode == 0, ran.stderr
    assert [line.split()[0] for line in ran.stdout.splitlines()[1:3]] == fleet.failed
    assert "ValueError: invalid literal for int() with base 10: 'n/a'" in ran.stdout


def test_show_prints_the_record_and_an_unknown_id_exits_3(fleet: Fleet, threadmill: Run) -> None:
    """show prints a failed task's traceback; an unknown id is explained and exits 3."""
    ran = threadmill("show", fleet.failed[1])
    assert ran.returncode == 0, ran.stderr
    assert "status           FAILED" in ran.stdout
    assert "Traceback (most recent call last):" in ran.stdout
    assert "ValueError: invalid literal for int() with base 10: '12x'" in ran.stdout

    ran = threadmill("show", "01900000-0000-7000-8000-000000000000")
    assert (ran.returncode, ran.stdout) == (3, "")
    assert "no task with id" in ran.stderr


def test_show_finds_a_task_by_the_eight_characters_the_demo_prints(
    fleet: Fleet, threadmill: Run
) -> None:
    """The last 8 characters of an id (what `threadmill demo` prints) show that task; a start
    several ids share lists them and exits 3; ls with no --status lists the waiting tasks."""
    ran = threadmill("show", fleet.failed[1][-8:])
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[0] == f"id               {fleet.failed[1]}"
    shared = shared_start(fleet)
    ran = threadmill("show", shared)
    assert (ran.returncode, ran.stdout) == (3, "")
    assert f"{fleet.failed[0]} (reports, FAILED)" in ran.stderr
    ran = threadmill("ls", "emails")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[1].split()[0] == fleet.ready[0]
    assert ran.stdout.splitlines()[-1].startswith("other segments: 1 DEFERRED, 1 RUNNING")


def test_requeue_and_cancel_report_what_they_did_and_refused(
    fleet: Fleet, threadmill: Run, broker: Broker
) -> None:
    """Actions do what the protocol allows, refuse the rest with reasons, and exit 0, 1 or 3."""
    ran = threadmill("requeue", fleet.failed[0], *fleet.running)
    assert ran.returncode == 1, ran.stderr
    assert f"requeued   {fleet.failed[0]}  (reports, now READY)" in ran.stdout
    assert f"refused    {fleet.running[0]}  it is RUNNING" in ran.stdout
    assert stored(broker, fleet.failed[0]).status is TaskResultStatus.READY
    assert stored(broker, fleet.running[0]).status is TaskResultStatus.RUNNING

    ran = threadmill("requeue", *fleet.successful)
    assert ran.returncode == 3
    assert ran.stdout.splitlines()[-1] == "requeued 0 of 3; refused 3"

    ran = threadmill("requeue", "--failed", "reports", "--json")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["done"] == [{"id": fleet.failed[1], "status": "READY"}]

    ran = threadmill("cancel", *fleet.ready, *fleet.deferred, fleet.successful[0])
    assert ran.returncode == 1, ran.stderr
    assert f"refused    {fleet.successful[0]}  it already finished (SUCCESSFUL)" in ran.stdout
    assert broker.counts()["emails"].cancelled == 2


def test_purge_asks_and_purges_only_when_confirmed(
    fleet: Fleet, threadmill: Run, broker: Broker
) -> None:
    """purge answered no leaves the segment (exit 3); answered yes, or with --yes, deletes it."""
    ran = threadmill("purge", "emails", "--status", "successful", stdin="no\n")
    assert ran.returncode == 3
    assert "Delete the 3 SUCCESSFUL task(s) of queue 'emails'?" in ran.stderr
    assert broker.counts()["emails"].successful == 3

    ran = threadmill("purge", "emails", "--status", "successful", stdin="y\n")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "purged 3 SUCCESSFUL task(s) from queue 'emails'"

    ran = threadmill("purge", "reports", "--status", "failed", "--yes")
    assert (ran.returncode, ran.stderr) == (0, "")
    assert "reports" not in broker.counts()


def test_purge_json_without_yes_refuses_before_asking(
    fleet: Fleet, threadmill: Run, broker: Broker
) -> None:
    """purge --json is for scripts, which cannot answer a prompt: without --yes it asks
    nothing, says --yes is needed, exits 2 and purges nothing."""
    ran = threadmill("purge", "emails", "--status", "successful", "--json", stdin="y\n")
    assert ran.returncode == 2
    assert ran.stdout == ""
    assert ran.stderr == (
        "threadmill purge: --json asks for no prompt, so it needs --yes to purge "
        "(nothing was purged)\n"
    )
    assert broker.counts()["emails"].successful == 3


def test_ls_of_a_queue_that_holds_nothing_at_all_says_so_and_exits_3(
    fleet: Fleet, threadmill: Run
) -> None:
    """A queue with no task in any segment (misspelt, say) is not "no FAILED tasks": exit 3,
    naming the queues that hold tasks; an empty segment of a real queue is still exit 0."""
    ran = threadmill("ls", "emials", "--status", "failed")
    assert ran.returncode == 3
    assert ran.stdout == ""
    assert ran.stderr == (
        "threadmill ls: queue 'emials' holds no tasks at all, in any segment (misspelt, or "
        "never used?); queues holding tasks: emails, reports\n"
    )
    ran = threadmill("ls", "emials", "--status", "failed", "--json")
    assert ran.returncode == 3
    assert json.loads(ran.stdout)["tasks"] == []
    ran = threadmill("ls", "emails", "--status", "failed")
    assert (ran.returncode, ran.stdout.strip()) == (0, "no FAILED tasks in queue 'emails'")
