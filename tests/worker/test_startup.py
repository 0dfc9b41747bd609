"""How `threadmill worker` starts, run as a user runs it: the console script, next to a package."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import RedisServer, free_port
from threadmill_core import Broker, TaskResult, TaskResultStatus
from threadmill_core.ids import new_task_id

pytestmark = pytest.mark.redis

#: The console script pip installed beside this interpreter: what a user types.
THREADMILL = str(Path(sys.executable).with_name("threadmill"))

TASKS = """\
from threadmill_core import task

@task
def add(a, b):
    return a + b

@task
def mul(a, b):
    return a * b
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A directory holding a package ``myapp``: ``tasks`` (two tasks), ``empty`` (none), and
    ``broken`` (imports a module that does not exist)."""
    package = tmp_path / "myapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tasks.py").write_text(TASKS)
    (package / "empty.py").write_text("VALUE = 1\n")
    (package / "broken.py").write_text("import no_such_dependency_anywhere\n")
    return tmp_path


def worker(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`threadmill worker ARGS` run in `project`, to its end; stdout and stderr together."""
    return subprocess.run(
        [THREADMILL, "worker", *args],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=60,
    )


def test_a_worker_imports_task_modules_from_the_directory_it_runs_in(
    project: Path, broker: Broker, broker_url: str
) -> None:
    """`threadmill worker myapp.tasks` run next to myapp/ imports it, and its processes run it."""
    planted = TaskResult(id=new_task_id(), task_path="myapp.tasks:add", args=[2, 3])
    broker.backend.enqueue([planted])
    done = worker(project, "myapp.tasks", "-b", broker_url, "-p", "1", "--burst")
    assert done.returncode == 0, done.stdout
    final = broker.get_result(planted.id)
    assert final.status is TaskResultStatus.SUCCESSFUL, final.errors
    assert final.return_value == 5


def test_a_module_given_as_a_file_path_is_refused_with_its_dotted_name(
    project: Path, broker_url: str
) -> None:
    """``myapp/tasks.py`` is a usage error that names ``myapp.tasks``, before anything starts."""
    done = worker(project, "myapp/tasks.py", "-b", broker_url, "--burst")
    assert done.returncode == 2, done.stdout
    assert "'myapp.tasks'" in done.stdout
    assert "Traceback" not in done.stdout


def test_a_module_that_does_not_import_is_one_line_and_a_nonzero_exit(
    project: Path, broker_url: str
) -> None:
    """A module that fails to import: one error line naming it and the cause, exit code 3; the
    traceback only at DEBUG."""
    done = worker(project, "myapp.tasks", "myapp.broken", "-b", broker_url, "--burst")
    assert done.returncode == 3, done.stdout
    [line] = done.stdout.splitlines()[-1:]
    assert "cannot import task module 'myapp.broken'" in line
    assert "No module named 'no_such_dependency_anywhere'" in line
    assert "Traceback" not in done.stdout
    debug = worker(project, "myapp.broken", "-b", broker_url, "--burst", "--log-level", "DEBUG")
    assert debug.returncode == 3, debug.stdout
    assert "Traceback" in debug.stdout


def test_the_first_lines_say_what_the_worker_runs(project: Path, broker_url: str) -> None:
    """Backend, queues, processes, threads, prefetch and every task come first; a module that
    defines no task is a warning."""
    done = worker(
        project, "myapp.tasks", "myapp.empty", "-b", broker_url, "-Q", "high,low",
        "-p", "1", "-t", "2", "--prefetch", "3", "--burst",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout
    lines = done.stdout.splitlines()
    assert lines[0].endswith(f"INFO    MainProcess threadmill.supervisor: backend {broker_url}")
    assert lines[1].endswith("queues high, low; 1 process x 2 threads, prefetch 3 per process")
    assert "WARNING" in lines[2]
    assert lines[2].endswith("module myapp.empty defines no task: importing it registered no @task "
                             "function")  # fmt: skip
    assert lines[3].endswith("2 tasks: myapp.tasks:add, myapp.tasks:mul")


def test_waiting_tasks_that_no_loaded_module_registers_are_warned_about(
    project: Path, broker: Broker, broker_url: str
) -> None:
    """READY tasks whose module is not on the command line are named in a warning at start."""
    forgotten = [
        TaskResult(id=new_task_id(), task_path="myapp.mailer:send", args=[n]) for n in range(2)
    ]
    known = TaskResult(id=new_task_id(), task_path="myapp.tasks:add", args=[1, 1])
    broker.backend.enqueue([*forgotten, known])
    done = worker(project, "myapp.tasks", "-b", broker_url, "-p", "1", "--burst")
    assert done.returncode == 0, done.stdout
    [warning] = [line for line in done.stdout.splitlines() if "no loaded module" in line]
    assert "WARNING" in warning
    assert "myapp.mailer:send (2)" in warning
    assert "myapp.tasks:add" not in warning


def test_debug_logs_no_maintenance_notification_failure_per_connection(
    project: Path, broker_url: str
) -> None:
    """At DEBUG, the Redis driver is not asked for maintenance notifications (redis-py 7 and
    later log a failure per connection on servers without them)."""
    done = worker(project, "myapp.tasks", "-b", broker_url, "-p", "1", "--burst",
                  "--log-level", "DEBUG")  # fmt: skip
    assert done.returncode == 0, done.stdout
    assert "maintenance notifications" not in done.stdout.lower()
    assert "MAINT_NOTIFICATIONS" not in done.stdout


def test_a_backend_that_never_answers_ends_the_worker_with_one_line(project: Path) -> None:
    """A backend that never answered within --connect-timeout ends the worker with one error
    line naming it (credentials hidden) and exit code 3, instead of retrying for ever."""
    url = f"redis://jobs:s3cret@127.0.0.1:{free_port()}/0"
    started = time.monotonic()
    done = worker(project, "myapp.tasks", "-b", url, "-p", "1", "--connect-timeout", "1.5")
    took = time.monotonic() - started
    assert done.returncode == 3, done.stdout
    assert 1.5 <= took < 15, took
    [error] = [line for line in done.stdout.splitlines() if "ERROR" in line]
    masked = url.replace("s3cret", "***")
    assert error.endswith(
        f"cannot start: backend {masked} did not answer within 1.5 s of starting "
        f"(RedisUnavailable: Redis unavailable at redis://127.0.0.1:{url.rsplit(':', 1)[1]} "
        "(connection refused) during the clock read (TIME)); check the URL, or start the "
        "backend first (--connect-timeout sets the wait)"
    ), error
    assert "s3cret" not in done.stdout
    assert "Traceback" not in done.stdout
    assert "worker 0" not in done.stdout, "no worker process started"


def test_a_backend_that_comes_up_within_the_connect_timeout_is_waited_for(
    project: Path, namespace: str
) -> None:
    """A server started a moment after its worker is waited for: the burst runs and exits 0."""
    server = RedisServer()
    server.stop()
    url = f"{server.url}?namespace={namespace}"
    try:
        with subprocess.Popen(
            [THREADMILL, "worker", "myapp.tasks", "-b", url, "-p", "1", "--burst",
             "--connect-timeout", "30"],
            cwd=project, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        ) as running:  # fmt: skip
            assert running.stdout is not None
            seen = []
            deadline = time.monotonic() + 30
            # The worker meets a refused connection first (however slow its start).
            while not any("backend unavailable" in line for line in seen):
                assert time.monotonic() < deadline, "".join(seen)
                line = running.stdout.readline()
                assert line, "".join(seen)  # the worker ended before it said so
                seen.append(line)
            server.start()
            rest, _ = running.communicate(timeout=60)
        out = "".join(seen) + rest
        assert running.returncode == 0, out
        assert "backend reachable again" in out
    finally:
        server.close()
