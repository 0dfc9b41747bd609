"""``threadmill worker --metrics-port`` at the edges: a worker process that dies unseen, a
cancel, a backend that answers nothing."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RedisServer, free_port
from tests.worker import test_metrics
from tests.worker.test_metrics import get, loop_pids, running_worker, scrape, served, until, value
from threadmill_core import Broker, TaskResultStatus

pytestmark = pytest.mark.redis

#: test_metrics's fixtures (``metricsapp.tasks``), found here by name.
project = test_metrics.project
tasks = test_metrics.tasks


def test_a_worker_process_that_died_unscraped_leaves_no_gauge_behind(
    project: Path, tasks: Any, broker: Broker, broker_url: str
) -> None:
    """A worker process that reported a running task and died before any scrape saw it alive
    leaves neither its running task nor its loop in /metrics once it is replaced."""
    marker = project / "reported"
    record = tasks.reported_then_held.using(broker=broker).enqueue(str(marker))
    port = free_port()
    with running_worker(project, broker_url, port, "-p", "1"):
        # No request reaches the endpoints until the process is dead.
        until("the task reported running", marker.exists, timeout=60)
        killed = int(marker.read_text())
        os.kill(killed, signal.SIGKILL)
        until("its next attempt", lambda: broker.get_result(record.id).is_finished, timeout=60)
        until("a new worker process", lambda: any(p != killed for p in loop_pids(port)))
        finished = "threadmill_tasks_finished_total"
        until("the outcome counted", lambda: value(scrape(port), finished) == 1)
        after = scrape(port)
        assert killed not in loop_pids(port)
        assert value(after, "threadmill_tasks_running") == 0
        assert value(after, "threadmill_tasks_started_total") == 2  # the killed one's count kept


def test_a_task_cancelled_while_it_runs_is_counted_finished_as_documented(
    project: Path, tasks: Any, broker: Broker, broker_url: str
) -> None:
    """A task cancelled while it runs is counted once in threadmill_tasks_finished_total, with
    the status ``cancelled`` that docs/operations.md's table lists for that counter."""
    record = tasks.hold.using(broker=broker).enqueue(0)
    port = free_port()
    with running_worker(project, broker_url, port):
        until("the task running", lambda: broker.get_result(record.id).status.value == "RUNNING")
        assert broker.cancel(record.id) is not None
        until("the task cancelled", lambda: broker.get_result(record.id).is_finished)
        assert broker.get_result(record.id).status is TaskResultStatus.CANCELLED
        finished = "threadmill_tasks_finished_total"
        until("the outcome counted", lambda: value(scrape(port), finished) == 1)
        assert value(scrape(port), finished, status="cancelled") == 1
    table = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    [row] = [line for line in table.splitlines() if line.startswith(f"| `{finished}`")]
    assert "`cancelled`" in row, row


def test_healthz_stays_healthy_while_the_backend_does_not_answer(project: Path) -> None:
    """A backend that keeps its connections but answers nothing (its server stopped with
    SIGSTOP: a partition, a stalled server) is an outage: /readyz says so, and /healthz stays
    200 for as long, though the supervisor's loop waits in the backend's calls."""
    server = RedisServer()
    port = free_port()
    try:
        # A short lease: the reaper (in the supervisor's loop) calls the backend every second.
        with running_worker(project, f"{server.url}?namespace=frozen", port, "--lease-ttl", "3"):
            until("the endpoints", lambda: served(port))
            until("both loops turning", lambda: len(loop_pids(port)) == 2)
            assert server.process is not None
            os.kill(server.process.pid, signal.SIGSTOP)
            answers = []
            try:
                until("/readyz to say the backend does not answer",
                      lambda: get(port, "/readyz")[0] == 503)  # fmt: skip
                # Longer than a stall bound (5 s) past the reaper's first call that hangs.
                for _ in range(15):
                    answers.append(get(port, "/healthz"))
                    time.sleep(1)
                # A scrape asks the backend the queues' depth (the last ask is > 5 s old): it
                # waits for the driver's timeouts, and /healthz does not wait for it.
                scraping = threading.Thread(target=get, args=(port, "/metrics"), daemon=True)
                scraping.start()
                time.sleep(1)
                answers.append(get(port, "/healthz"))
                assert scraping.is_alive()
            finally:
                os.kill(server.process.pid, signal.SIGCONT)
            assert [answer for answer in answers if answer[0] != 200] == []
            until("/readyz to recover", lambda: get(port, "/readyz") == (200, "ok\n"), 60)
    finally:
        server.close()


def test_the_supervisor_waiting_on_the_backend_is_stuck_only_past_the_call_bound() -> None:
    """/healthz's word on the supervisor: idle past the stall bound is stuck, unless it waits
    in a backend call, which is stuck only once that call has lasted `CALL_BOUND`."""
    from threadmill_core.worker.monitor import CALL_BOUND, supervisor_stall

    assert supervisor_stall(1.0, None, 5.0) is None
    assert supervisor_stall(6.0, None, 5.0) == "supervisor: its loop has not turned for 6.0 s"
    assert supervisor_stall(60.0, 55.0, 5.0) is None
    late = CALL_BOUND + 1
    assert supervisor_stall(late + 1, late, 5.0) == (
        f"supervisor: a call to the backend has not returned for {late:.1f} s"
    )


def test_healthz_stays_healthy_while_a_graceful_stop_waits_for_a_running_task(
    project: Path, tasks: Any, broker: Broker, broker_url: str
) -> None:
    """At SIGTERM the command waits for its running task (a graceful stop): /healthz stays 200
    meanwhile, for longer than the stall bound (5 s), since a drain is not a stall."""
    record = tasks.hold.using(broker=broker).enqueue(0)
    port = free_port()
    with running_worker(project, broker_url, port) as process:
        until("the endpoints", lambda: served(port))
        until("the task running", lambda: broker.get_result(record.id).status.value == "RUNNING")
        process.send_signal(signal.SIGTERM)
        answers = []
        for _ in range(8):
            time.sleep(1)
            answers.append(get(port, "/healthz"))
        assert process.poll() is None, "a graceful stop waits for the running task"
        (project / "gate").touch()
        process.wait(timeout=60)
        assert broker.get_result(record.id).status is TaskResultStatus.SUCCESSFUL
    assert [answer for answer in answers if answer[0] != 200] == []
