"""Worker processes under a supervisor, on a real Redis: crashes, shutdowns, long tasks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import timedelta

import pytest

from tests.faults.flaky import FlakyBackend
from tests.worker import recording_tasks
from threadmill_core import Broker, TaskResultStatus, connect
from threadmill_core.worker.supervisor import EXIT_ABANDONED, Supervisor, WorkerSettings
from threadmill_redis import RedisBackend
from threadmill_redis.testing import start_recorded

pytestmark = pytest.mark.redis

MODULE = "tests.worker.recording_tasks"


def runs_by_task(events: list[str], kind: str) -> Counter[int]:
    return Counter(int(e.split(":")[1]) for e in events if e.startswith(kind + ":"))


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def start_cli(broker_url: str, *options: str) -> subprocess.Popen[str]:
    """`threadmill worker` as a user starts it, in a process group of its own (as a shell does)."""
    return subprocess.Popen(
        [sys.executable, "-m", "threadmill_core.cli", "worker", MODULE,
         "--broker", broker_url, *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )  # fmt: skip


def stop_gracefully(process: subprocess.Popen[str], how: str) -> None:
    if how == "sigterm":
        process.send_signal(signal.SIGTERM)
    else:  # Ctrl-C in a terminal: SIGINT to the whole foreground process group
        os.killpg(process.pid, signal.SIGINT)


@pytest.mark.slow
def test_killed_worker_processes_lose_nothing(
    broker: Broker, broker_url: str, read_events: Callable[[], list[str]], namespace: str
) -> None:
    """500 tasks under five SIGKILLs all succeed; a kill reruns only the tasks it caught in
    flight (started and not acknowledged), and charges only those it caught running."""
    url = broker_url.split("?")[0]
    total = 500
    work = recording_tasks.sleepy.using(broker=broker)
    records = broker.enqueue_many(work, [((url, namespace, n, 20), {}) for n in range(total)])
    settings = WorkerSettings(
        broker_url=broker_url,
        modules=(MODULE,),
        processes=2,
        threads=2,
        lease_ttl=timedelta(seconds=1),
        poll_interval=timedelta(milliseconds=100),
        burst=True,
        log_level="WARNING",
    )
    supervisor = Supervisor(settings)
    runner = threading.Thread(target=supervisor.run)
    runner.start()
    killed: list[int] = []
    try:
        for round_ in range(5):
            # Kill only once the run is well under way, and spread the kills out.
            wait_until(
                lambda r=round_: len(read_events()) >= 60 * (r + 1) and supervisor.pids(),
                timeout=60,
                what="the workers to make progress",
            )
            victim = supervisor.pids()[0]
            os.kill(victim, signal.SIGKILL)
            killed.append(victim)
            wait_until(lambda v=victim: v not in supervisor.pids(), 10, "the kill to land")
        runner.join(timeout=240)
        assert not runner.is_alive(), "the supervisor did not finish the burst"
    finally:
        if runner.is_alive():
            supervisor.request_stop()
            runner.join(timeout=60)

    finals = [broker.get_result(r.id) for r in records]
    assert Counter(f.status for f in finals) == {TaskResultStatus.SUCCESSFUL: total}
    assert sorted(f.return_value for f in finals) == list(range(total))
    assert supervisor.restarts >= 5

    runs = [event.split(":") for event in read_events()]
    started = Counter(int(n) for kind, n, _pid, _attempt in runs if kind == "start")
    assert set(started) == set(range(total))
    rerun = {n for n, count in started.items() if count > 1}
    first_pid = {}
    for kind, n, pid, _attempt in runs:
        if kind == "start":
            first_pid.setdefault(int(n), int(pid))
    assert {first_pid[n] for n in rerun} <= set(killed), (
        "a rerun task first ran in a killed process"
    )

    def of(kind: str, pid: int) -> set[int]:
        return {int(n) for k, n, p, _ in runs if k == kind and int(p) == pid}

    last_pid = {int(n): int(pid) for kind, n, pid, _ in runs if kind == "start"}
    in_flight = {}
    for pid in killed:
        # A kill reruns at most the tasks it caught in flight: started in the killed
        # process and not acknowledged (running, or finished with the acknowledgement
        # on its way). Tasks it had prefetched never started there, so they run once.
        in_flight[pid] = of("start", pid) - of("acked", pid)
        running = of("start", pid) - of("end", pid)
        caught = {n for n in of("start", pid) if last_pid[n] != pid}
        assert running <= caught, f"a task the kill of {pid} cut short did not run again"
        assert len(running) <= settings.threads, running
        assert caught <= in_flight[pid], f"the kill of {pid} reran tasks it had not caught"
    # Only an attempt that ran is charged: an AcknowledgementTimeout only where a kill
    # caught the task in flight, and every other task is one attempt with no error
    # (the ones a killed process had prefetched included).
    for record in finals:
        n = record.return_value
        catches = sum(n in tasks for tasks in in_flight.values())
        assert record.attempts == 1 + len(record.errors), record
        assert len(record.errors) <= catches, record
        assert all(e.exception_class_path.endswith("AcknowledgementTimeout") for e in record.errors)


@pytest.mark.parametrize("how", ["sigterm", "ctrl-c"])
def test_graceful_stop_finishes_running_tasks_and_loses_nothing(
    broker: Broker,
    broker_url: str,
    read_events: Callable[[], list[str]],
    namespace: str,
    how: str,
) -> None:
    """SIGTERM or Ctrl-C mid-run: running tasks finish and are acknowledged, the rest stay READY."""
    url = broker_url.split("?")[0]
    work = recording_tasks.sleepy.using(broker=broker)
    records = broker.enqueue_many(work, [((url, namespace, n, 300), {}) for n in range(40)])
    process = start_cli(broker_url, "--processes", "1", "--threads", "2", "--lease-ttl", "5")
    try:
        wait_until(lambda: len(read_events()) >= 6, 60, "the worker to start tasks")
        stop_gracefully(process, how)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output

    finals = [broker.get_result(r.id) for r in records]
    statuses = Counter(f.status for f in finals)
    assert set(statuses) <= {TaskResultStatus.SUCCESSFUL, TaskResultStatus.READY}
    assert statuses[TaskResultStatus.READY] > 0, "the shutdown came mid-run"
    events = read_events()
    assert runs_by_task(events, "start") == runs_by_task(events, "end"), "no run was cut short"
    successful = {f.args[2] for f in finals if f.status is TaskResultStatus.SUCCESSFUL}
    assert set(runs_by_task(events, "end")) == successful


def test_second_sigterm_exits_at_once_and_the_reaper_recovers(
    broker: Broker, broker_url: str, read_events: Callable[[], list[str]], namespace: str
) -> None:
    """A second SIGTERM stops at once, saying which task it abandoned and with exit code 4;
    the abandoned task (its start recorded) is retried and succeeds later."""
    url = broker_url.split("?")[0]
    record = recording_tasks.long_running.using(broker=broker).enqueue(url, namespace, 30.0)
    process = start_cli(broker_url, "--processes", "1", "--threads", "1", "--lease-ttl", "1")
    try:
        wait_until(lambda: len(read_events()) >= 1, 60, "the task to start")
        backend = broker.backend
        assert isinstance(backend, RedisBackend)
        wait_until(lambda: start_recorded(backend, record.id), 30, "its start to be recorded")
        process.send_signal(signal.SIGTERM)
        time.sleep(0.3)  # let the first signal land before the second
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == EXIT_ABANDONED, output
    assert broker.get_result(record.id).status is TaskResultStatus.RUNNING
    assert any("abandoned while running" in line and record.id in line
               for line in output.splitlines()), output  # fmt: skip

    # The task was abandoned mid-run; a new supervisor's reaper recovers it.
    process = start_cli(
        broker_url, "--processes", "1", "--threads", "1", "--lease-ttl", "1",
        "--poll-interval", "0.2", "--shutdown-timeout", "1",
    )  # fmt: skip
    try:
        wait_until(
            lambda: broker.get_result(record.id).attempts >= 2, 30, "the reaper to retry the task"
        )
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
    final = broker.get_result(record.id)
    assert final.errors[0].exception_class_path.endswith("AcknowledgementTimeout")


@pytest.mark.slow
def test_task_outliving_three_lease_ttls_completes_once(
    broker: Broker, broker_url: str, read_events: Callable[[], list[str]], namespace: str
) -> None:
    """Heartbeats keep a 3.5 s task alive under a 1 s lease: one attempt, no retry."""
    url = broker_url.split("?")[0]
    record = recording_tasks.long_running.using(broker=broker).enqueue(url, namespace, 3.5)
    process = start_cli(
        broker_url, "--processes", "1", "--threads", "1", "--lease-ttl", "1", "--burst",
        "--poll-interval", "0.2",
    )  # fmt: skip
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    final = broker.get_result(record.id)
    assert (final.status, final.attempts, final.errors) == (TaskResultStatus.SUCCESSFUL, 1, ())
    assert final.return_value is False, "the lease was never lost"
    events = read_events()
    assert [e.split(":")[0] for e in events] == ["start", "end"]
    assert all(e.endswith(":1") for e in events), "both on attempt 1"


def test_unregistered_task_is_given_back_without_running(broker: Broker, broker_url: str) -> None:
    """A record naming a path the worker's modules did not register is not imported nor run:
    it is given back for another worker, uncharged."""
    from threadmill_core import TaskResult
    from threadmill_core.ids import new_task_id

    planted = TaskResult(id=new_task_id(), task_path="os:system", args=["exit 1"])
    broker.backend.enqueue([planted])
    process = start_cli(broker_url, "--processes", "1", "--burst", "--poll-interval", "0.2")
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    back = broker.get_result(planted.id)
    assert (back.status, back.attempts, back.errors) == (TaskResultStatus.DEFERRED, 0, ())
    assert f"task {planted.id} (os:system) is not registered here: given back" in output


def test_the_maintenance_loop_sleeps_until_a_deferred_task_is_due(
    broker: Broker,
    broker_url: str,
    read_events: Callable[[], list[str]],
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A deferred task runs once due, and the idle maintenance loop made a handful of calls."""
    parents: list[FlakyBackend] = []

    def counted(url: str) -> Broker:  # the supervisor's own backend; its children connect as usual
        backend = FlakyBackend(connect(url).backend)
        parents.append(backend)
        return Broker(backend, url=url)

    monkeypatch.setattr("threadmill_core.worker.settings.connect", counted)
    url = broker_url.split("?")[0]
    later = recording_tasks.sleepy.using(broker=broker, run_after=timedelta(seconds=2))
    record = later.enqueue(url, namespace, 0, 0)
    settings = WorkerSettings(
        broker_url=broker_url,
        modules=(MODULE,),
        threads=1,
        # Long leases: the reaper's turn (every 40 s) does not come during the test.
        lease_ttl=timedelta(minutes=2),
        poll_interval=timedelta(milliseconds=100),
        log_level="WARNING",
    )
    supervisor = Supervisor(settings)
    runner = threading.Thread(target=supervisor.run)
    runner.start()
    try:
        final = broker.wait(record.id, timeout=60)
    finally:
        supervisor.request_stop()
        runner.join(timeout=60)
    assert final.status is TaskResultStatus.SUCCESSFUL
    assert final.run_after is not None
    assert final.started_at is not None
    assert final.started_at >= final.run_after
    # The last connection is the maintenance loop's: the first one, closed while the
    # worker processes started, only waited for the backend.
    parent = parents[-1]
    # Polling every 100 ms (as before) would have called each about 20 times by now.
    assert parent.calls["claim_expired"] == 1
    assert parent.calls["promote_due"] <= 2
    assert parent.calls["next_due"] <= 4
