"""``threadmill worker --metrics-port``: /metrics, /healthz and /readyz, run as a user runs it."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import RedisServer, free_port
from tests.worker.test_startup import THREADMILL
from threadmill_core import Broker, TaskResultStatus

pytestmark = pytest.mark.redis

TASKS = """\
import os
import time
from pathlib import Path
from typing import Any

from threadmill_core import ExponentialBackoff, TaskContext, task

@task
def ok(n):
    return n


@task(retry=ExponentialBackoff(max_retries=0))
def boom(n):
    raise ValueError(f"boom {n}")


@task(retry=ExponentialBackoff(base_delay=0.05, max_retries=3, jitter=0))
def flaky(context: TaskContext, n):
    if context.attempt == 1:
        raise ConnectionError("the first try fails")
    return n


@task
def spawner(n):
    ok.enqueue(n)


@task
def probe():
    import sys

    from threadmill_core.plugins import plugin_manager

    hooks = plugin_manager().hook
    return {
        "prometheus_client": "prometheus_client" in sys.modules,
        "ticked": [impl.plugin_name for impl in hooks.threadmill_worker_ticked.get_hookimpls()],
        "started": [impl.plugin_name for impl in hooks.threadmill_task_started.get_hookimpls()],
    }


@task
def hold(n):
    while not Path(os.environ["GATE"]).exists():
        time.sleep(0.02)
    return n


@task
def reported_then_held(marker):
    # Once this process's loop reports it running: its pid to `marker`, then held until the
    # gate opens. An attempt after that returns at once.
    path = Path(marker)
    if path.exists():
        return 0
    from prometheus_client import multiprocess

    files = multiprocess.MultiProcessCollector(None, os.environ["PROMETHEUS_MULTIPROC_DIR"])
    while not any(sample.value for family in files.collect() for sample in family.samples
                  if family.name == "threadmill_tasks_running"):  # fmt: skip
        time.sleep(0.02)
    path.with_suffix(".tmp").write_text(str(os.getpid()))
    path.with_suffix(".tmp").rename(path)
    while not Path(os.environ["GATE"]).exists():
        time.sleep(0.02)
    return 1
"""

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A directory holding ``metricsapp.tasks``, the tasks above."""
    package = tmp_path / "metricsapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tasks.py").write_text(TASKS)
    return tmp_path


@pytest.fixture
def tasks(project: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``metricsapp.tasks`` imported here too, to enqueue its tasks with their retry policies."""
    monkeypatch.syspath_prepend(str(project))
    return importlib.import_module("metricsapp.tasks")


@contextlib.contextmanager
def running_worker(project: Path, url: str, port: int, *args: str) -> Iterator[
    subprocess.Popen[str]
]:  # fmt: skip
    """`threadmill worker metricsapp.tasks`, two processes of one thread each, serving on
    `port`; stopped with SIGTERM at the end."""
    env = {**os.environ, "GATE": str(project / "gate")}
    command = [THREADMILL, "worker", "metricsapp.tasks", "-b", url, "-p", "2", "-t", "1",
               "--prefetch", "0", "--metrics-port", str(port), *args]  # fmt: skip
    with subprocess.Popen(
        command, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        try:
            yield process
        except BaseException:
            (project / "gate").touch()
            process.send_signal(signal.SIGTERM)
            print(process.communicate(timeout=60)[0])
            raise
        (project / "gate").touch()
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=60)
        assert process.returncode == 0, out


def get(port: int, path: str) -> tuple[int, str]:
    """The status and body of GET `path` on the worker's port; (0, why) if it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def until(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def scrape(port: int) -> Samples:
    """Every sample of /metrics, parsed by prometheus_client's own parser."""
    status, body = get(port, "/metrics")
    assert status == 200, body
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples of `name` whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, have), v in samples.items() if n == name and wanted <= have)


def served(port: int) -> bool:
    return get(port, "/healthz")[0] != 0


def test_metrics_count_what_happened_across_two_worker_processes(
    project: Path, tasks: Any, broker: Broker, broker_url: str
) -> None:
    """Scraped during and after a run of known outcomes, every counter of /metrics equals what
    happened in the two worker processes, and the gauges count the tasks running."""

    def enqueue(name: str, count: int) -> list[str]:
        return [getattr(tasks, name).using(broker=broker).enqueue(n).id for n in range(count)]

    ids = enqueue("hold", 2)
    port = free_port()
    with running_worker(project, broker_url, port):
        until("the endpoints", lambda: served(port))
        # One thread and no prefetch each: the two held tasks run in different processes.
        until("two tasks running", lambda: value(scrape(port), "threadmill_tasks_running") == 2)
        during = scrape(port)
        pids = {dict(labels)["pid"] for (name, labels) in during
                if name == "threadmill_worker_loop_turned_timestamp_seconds"}  # fmt: skip
        assert len(pids) == 2, during
        assert value(during, "threadmill_tasks_started_total", task="metricsapp.tasks:hold") == 2
        assert value(during, "threadmill_worker_processes") == 2
        (project / "gate").touch()

        ids += enqueue("ok", 12) + enqueue("boom", 3) + enqueue("flaky", 4) + enqueue("spawner", 2)

        def done() -> bool:
            finished = [broker.get_result(i).is_finished for i in ids]
            counts = broker.backend.counts()["default"]
            return all(finished) and counts.pending == 0

        until("every task to finish", done, timeout=60)
        until(
            "the follow-ups' outcomes",
            lambda: value(scrape(port), "threadmill_tasks_finished_total") == 2 + 12 + 3 + 4 + 4,
        )
        # Gauges: the running tasks at each worker's next turn, the depth at most 5 s old.
        until(
            "the gauges to catch up",
            lambda: (
                (samples := scrape(port)) is not None
                and value(samples, "threadmill_tasks_running") == 0
                and value(samples, "threadmill_queue_tasks", status="failed") == 3
            ),
        )
        after = scrape(port)

    def count(name: str, task: str, **labels: str) -> float:
        return value(after, name, queue="default", task=f"metricsapp.tasks:{task}", **labels)

    started, finished = "threadmill_tasks_started_total", "threadmill_tasks_finished_total"
    assert count(started, "hold") == 2
    assert count(started, "ok") == 12 + 2  # the spawners' follow-ups too
    assert count(started, "boom") == 3
    assert count(started, "flaky") == 4 * 2
    assert count(started, "spawner") == 2
    assert count(finished, "ok", status="successful") == 14
    assert count(finished, "boom", status="failed") == 3
    assert count(finished, "flaky", status="successful") == 4
    assert value(after, finished, status="failed") == 3
    assert value(after, finished, status="successful") == 2 + 14 + 4 + 2
    assert count("threadmill_tasks_retried_total", "flaky") == 4
    assert value(after, "threadmill_tasks_retried_total") == 4
    assert count("threadmill_tasks_enqueued_total", "ok") == 2  # by the spawners
    assert value(after, "threadmill_tasks_enqueued_total") == 2
    assert value(after, "threadmill_leases_expired_total") == 0
    assert value(after, "threadmill_tasks_quarantined_total") == 0
    # Every attempt that ran to an outcome was timed.
    assert value(after, "threadmill_task_run_seconds_count") == 2 + 14 + 3 + 8 + 2
    assert value(after, "threadmill_task_run_seconds_count", task="metricsapp.tasks:hold") == 2
    assert value(after, "threadmill_queue_tasks", queue="default", status="ready") == 0
    assert value(after, "threadmill_queue_tasks", queue="default", status="failed") == 3
    assert value(after, "threadmill_tasks_running") == 0
    for status in TaskResultStatus:  # every segment is reported, empty ones as 0
        assert ("threadmill_queue_tasks", frozenset(
            {("queue", "default"), ("status", status.value.lower())})) in after  # fmt: skip
    # What is served is in docs/operations.md's table, and so is all the dashboard asks for.
    docs = Path(__file__).parents[2] / "docs"
    table = set(re.findall(r"^\| `(threadmill_\w+)`", (docs / "operations.md").read_text(), re.M))
    dashboard = json.loads((docs / "grafana-dashboard.json").read_text())["panels"]
    asked = {re.sub(r"_(bucket|sum|count)$", "", name)
             for name in re.findall(r"threadmill_[a-z_]+", json.dumps(dashboard))}  # fmt: skip
    shown = {re.sub(r"_(bucket|sum|count)$", "", name) for name, _ in after}
    assert len(asked) >= 10
    assert asked <= table, asked - table
    assert shown <= table, shown - table


def test_healthz_turns_unhealthy_while_a_worker_process_is_stuck(
    project: Path, broker_url: str
) -> None:
    """/healthz answers 200 while every loop turns, 503 naming a worker process whose loop has
    stopped turning (stopped by SIGSTOP here), and 200 again once it turns again."""
    port = free_port()
    with running_worker(project, broker_url, port):
        until("the endpoints", lambda: served(port))
        until("both loops turning", lambda: len(loop_pids(port)) == 2)
        assert get(port, "/healthz") == (200, "ok\n")
        stuck = loop_pids(port)[0]
        os.kill(stuck, signal.SIGSTOP)
        try:
            until("/healthz to say it is stuck", lambda: get(port, "/healthz")[0] == 503)
            _, body = get(port, "/healthz")
            assert f"worker process {stuck}: its loop has not turned for " in body, body
        finally:
            os.kill(stuck, signal.SIGCONT)
        until("/healthz to recover", lambda: get(port, "/healthz") == (200, "ok\n"))


def test_a_killed_worker_process_keeps_its_counts_and_loses_its_gauges(
    project: Path, tasks: Any, broker: Broker, broker_url: str
) -> None:
    """A worker process killed and restarted: what it counted stays in /metrics, its gauges
    go (only live processes' loops are reported), and /healthz stays healthy."""
    ids = [tasks.ok.using(broker=broker).enqueue(n).id for n in range(6)]
    port = free_port()
    with running_worker(project, broker_url, port):
        until("the endpoints", lambda: served(port))
        until("the tasks", lambda: all(broker.get_result(i).is_finished for i in ids))
        finished = "threadmill_tasks_finished_total"
        until("the counts", lambda: value(scrape(port), finished) == 6)
        until("both loops turning", lambda: len(loop_pids(port)) == 2)
        killed = loop_pids(port)[0]
        os.kill(killed, signal.SIGKILL)
        until("a new worker process", lambda: killed not in (pids := loop_pids(port))
              and len(pids) == 2)  # fmt: skip
        assert value(scrape(port), finished) == 6
        assert get(port, "/healthz") == (200, "ok\n")


def test_an_enqueue_made_before_the_fork_is_counted_once(
    project: Path, broker: Broker, broker_url: str
) -> None:
    """A task module that enqueues as it is imported (in the supervisor, before the worker
    processes are forked from it) is counted once, not once more per forked process."""
    (project / "metricsapp" / "eager.py").write_text(
        "from metricsapp.tasks import ok\n\nok.enqueue(-1)\n"
    )
    port = free_port()
    env = {**os.environ, "GATE": "unused", "THREADMILL_URL": broker_url}
    with subprocess.Popen(
        [THREADMILL, "worker", "metricsapp.tasks", "metricsapp.eager", "-b", broker_url,
         "-p", "2", "--metrics-port", str(port)],
        cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    ) as process:  # fmt: skip
        try:
            until("the endpoints", lambda: served(port))
            finished = "threadmill_tasks_finished_total"
            until("the task", lambda: value(scrape(port), finished) == 1)
            time.sleep(1.5)  # a loop turn or more of each worker process: each has flushed
            assert value(scrape(port), "threadmill_tasks_enqueued_total") == 1
        finally:
            process.send_signal(signal.SIGTERM)
            out, _ = process.communicate(timeout=60)
    assert process.returncode == 0, out


def loop_pids(port: int) -> list[int]:
    samples = scrape(port)
    return sorted(int(dict(labels)["pid"]) for (name, labels) in samples
                  if name == "threadmill_worker_loop_turned_timestamp_seconds")  # fmt: skip


def test_readyz_says_when_the_backend_is_down(project: Path) -> None:
    """/readyz answers 200 while the backend answers, 503 saying so while its server is down,
    and 200 once it is back."""
    server = RedisServer()
    port = free_port()
    try:
        with running_worker(project, f"{server.url}?namespace=readyz", port):
            until("the endpoints", lambda: served(port))
            assert get(port, "/readyz") == (200, "ok\n")
            server.stop()
            until("/readyz to say the backend is down", lambda: get(port, "/readyz")[0] == 503)
            assert "the backend" in get(port, "/readyz")[1]
            assert get(port, "/healthz")[0] == 200  # the loops turn on through an outage
            server.start()
            until("/readyz to recover", lambda: get(port, "/readyz") == (200, "ok\n"))
    finally:
        server.close()


def test_a_metrics_port_in_use_stops_the_worker_with_one_line(
    project: Path, broker_url: str
) -> None:
    """A --metrics-port another program holds ends the worker at once: one line naming the
    address, exit code 3, and no worker process started."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [THREADMILL, "worker", "metricsapp.tasks", "-b", broker_url,
             "--metrics-port", str(port)],
            cwd=project, env={**os.environ, "GATE": "unused"}, capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 3, lines
    assert len(lines) == 1, lines
    assert f"cannot start: cannot serve metrics on 127.0.0.1:{port}: " in lines[0], lines


def test_health_exits_0_when_the_backend_answers_and_2_when_not(broker_url: str) -> None:
    """`threadmill health --broker URL` exits 0 when the backend answers, and 2 with one line
    naming the URL when nothing listens there."""
    ok = subprocess.run([THREADMILL, "health", "--broker", broker_url],
                        capture_output=True, text=True, timeout=60)  # fmt: skip
    assert (ok.returncode, ok.stdout) == (0, "ok\n"), ok.stderr
    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    down = subprocess.run([THREADMILL, "health", "--broker", nowhere, "--timeout", "5"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert down.returncode == 2
    assert down.stderr.startswith(f"threadmill health: {nowhere}: "), down.stderr
    assert len(down.stderr.strip().splitlines()) == 1, down.stderr


def test_health_json_says_the_same_on_stdout(broker_url: str) -> None:
    """`threadmill health --json` prints whether the backend answered, and why not, as JSON on
    stdout, with the same exit codes."""
    ok = subprocess.run([THREADMILL, "health", "--broker", broker_url, "--json"],
                        capture_output=True, text=True, timeout=60)  # fmt: skip
    assert (ok.returncode, json.loads(ok.stdout), ok.stderr) == (
        0, {"ok": True, "problem": None}, ""
    )  # fmt: skip
    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    down = subprocess.run([THREADMILL, "health", "--broker", nowhere, "--json"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert down.returncode == 2
    answer = json.loads(down.stdout)
    assert answer["ok"] is False
    assert answer["problem"].startswith(f"{nowhere}: "), answer


def test_without_a_metrics_port_no_metrics_code_is_loaded(
    project: Path, tasks: Any, broker: Broker, broker_url: str
) -> None:
    """Without --metrics-port a worker process neither imports prometheus_client nor has any
    hook implemented: the claim and acknowledgement path is unchanged."""
    record = tasks.probe.using(broker=broker).enqueue()
    done = subprocess.run(
        [THREADMILL, "worker", "metricsapp.tasks", "-b", broker_url, "-p", "1", "--burst"],
        cwd=project, env={**os.environ, "GATE": "unused"}, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    answer = broker.get_result(record.id).return_value
    assert answer == {"prometheus_client": False, "ticked": [], "started": []}


@pytest.mark.parametrize("port", ["0", "65536", "http"])
def test_a_metrics_port_out_of_range_is_a_usage_error(
    port: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--metrics-port takes 1 to 65535: anything else is refused by the parser, naming it."""
    from threadmill_core.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(["worker", "metricsapp.tasks", "-b", "redis://127.0.0.1:1/0", "--metrics-port", port])
    assert stopped.value.code == 2
    assert f"a port is a number from 1 to 65535, got {port!r}" in capsys.readouterr().err
