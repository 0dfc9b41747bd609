"""A brand-new Django project (``django-admin startproject``, DEBUG on), run as a user runs it:
each event of ``manage.py threadmill`` is one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RedisServer
from tests.django.servers import psycopg_connect
from threadmill_core import TaskResultStatus, connect

pytestmark = pytest.mark.redis

#: The project's one app and its task.
TASKS = """\
from django.tasks import task


@task
def add(a, b):
    return a + b
"""


class FreshProject:
    """``django-admin startproject site_`` plus an app ``shop`` with a task, on `url`."""

    def __init__(self, where: Path, url: str) -> None:
        self.where = where
        django_admin = Path(sys.executable).with_name("django-admin")
        subprocess.run([django_admin, "startproject", "site_", str(where)], check=True)
        (where / "shop").mkdir()
        (where / "shop" / "__init__.py").write_text("")
        (where / "shop" / "tasks.py").write_text(TASKS)
        settings = where / "site_" / "settings.py"
        text = settings.read_text()
        assert "DEBUG = True" in text, "startproject's settings have DEBUG on"
        settings.write_text(
            f'{text}\nINSTALLED_APPS += ["threadmill_django", "shop"]\n'
            f'TASKS = {{"default": {{"BACKEND": "threadmill_django.TaskBackend", '
            f'"OPTIONS": {{"url": {url!r}}}}}}}\n'
        )
        self.env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE",
                                                                    "THREADMILL_URL")}  # fmt: skip

    def manage(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """``python manage.py ARGV``: stdout and stderr together, as a terminal shows them."""
        return subprocess.run(
            [sys.executable, "manage.py", *argv], cwd=self.where, env=self.env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60,
        )  # fmt: skip


def test_each_task_event_of_a_worker_is_logged_once(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """django.tasks' "Task ... state=RUNNING" and "state=SUCCESSFUL" lines show once each,
    not a second time in threadmill's format, in forked and spawned worker processes."""
    url = f"{redis_server.url}?namespace=fresh-{uuid.uuid4().hex[:10]}"
    project = FreshProject(tmp_path, url)
    for spawn in ((), ("--spawn",)):
        enqueued = project.manage("shell", "-c", "from shop.tasks import add; "
                                  "print(add.enqueue(2, 3).id)")  # fmt: skip
        assert enqueued.returncode == 0, enqueued.stdout
        task_id = enqueued.stdout.split()[-1]
        ran = project.manage("threadmill", "worker", "-p", "1", "--burst", *spawn)
        assert ran.returncode == 0, ran.stdout
        about = [line for line in ran.stdout.splitlines() if task_id in line]
        running = [line for line in about if "state=RUNNING" in line]
        successful = [line for line in about if "state=SUCCESSFUL" in line]
        assert (len(running), len(successful)) == (1, 1), ran.stdout


#: Appended to shop/tasks.py: a schedule on a task of the ``emails`` alias, and one declared
#: with threadmill_core's own @periodic (the default alias's).
SCHEDULED = """
from datetime import timedelta

from threadmill_core import periodic as core_periodic, task as core_task
from threadmill_django import periodic


@periodic(every=timedelta(seconds=1), catch_up=timedelta(0), name="digest")
@task(backend="emails")
def digest():
    return "sent"


@core_periodic(every=timedelta(seconds=1), catch_up=timedelta(0), name="core-beat")
@core_task()
def beat():
    return "beat"
"""


def test_each_aliases_worker_stores_and_runs_its_own_schedules_only(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """Two aliases on two namespaces: `manage.py threadmill worker` stores the ticks of the
    default alias's schedules (threadmill_core's own included), `--backend emails worker`
    those of the emails alias's; neither stores the other's."""
    urls = {alias: f"{redis_server.url}?namespace={alias}-{uuid.uuid4().hex[:10]}"
            for alias in ("default", "emails")}  # fmt: skip
    project = FreshProject(tmp_path, urls["default"])
    settings = tmp_path / "site_" / "settings.py"
    settings.write_text(
        f'{settings.read_text()}TASKS["emails"] = {{"BACKEND": "threadmill_django.TaskBackend", '
        f'"OPTIONS": {{"url": {urls["emails"]!r}}}}}\n'
    )
    tasks = tmp_path / "shop" / "tasks.py"
    tasks.write_text(tasks.read_text() + SCHEDULED)
    workers = [
        subprocess.Popen(
            [sys.executable, "manage.py", "threadmill", *backend, "worker", "-p", "1"],
            cwd=tmp_path,
            env=project.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        for backend in ((), ("--backend", "emails"))
    ]
    try:
        time.sleep(5)
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
        outputs = [worker.communicate(timeout=60)[0] for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0], outputs
    stored: dict[str, set[str]] = {}
    for alias, url in urls.items():
        with connect(url) as broker:
            records = [
                record
                for status in TaskResultStatus
                for record in broker.backend.peek("default", status, limit=1000)
            ]
        stored[alias] = {record.task_path for record in records}
        ran = [r for r in records if r.status is TaskResultStatus.SUCCESSFUL]
        assert ran, (alias, outputs)
    assert stored == {"default": {"shop.tasks:beat"}, "emails": {"shop.tasks:digest"}}, outputs


def test_a_missing_postgresql_database_is_one_line(tmp_path: Path) -> None:
    """A PostgreSQL database that does not exist is one error line for the worker (exit 3)
    and for an inspecting command (exit 2), not also the driver's warning or a traceback."""
    server: Any = psycopg_connect("host=127.0.0.1 port=5432 user=postgres dbname=postgres")
    server.close()  # it answers (else the test skips)
    missing = f"threadmill_missing_{uuid.uuid4().hex[:10]}"
    project = FreshProject(tmp_path, f"postgresql://postgres@127.0.0.1:5432/{missing}")
    worker = project.manage("threadmill", "worker", "-p", "1", "--burst")
    assert worker.returncode == 3, worker.stdout
    [line] = [line for line in worker.stdout.splitlines() if "does not exist" in line]
    assert "ERROR" in line
    assert "cannot start: InvalidOption: PostgreSQL refused the connection" in line
    assert "psycopg" not in worker.stdout
    stats = project.manage("threadmill", "stats")
    assert stats.returncode == 2, stats.stdout
    assert stats.stdout.splitlines() == [
        f"threadmill: PostgreSQL refused the connection: connection failed: connection to "
        f'server at "127.0.0.1", port 5432 failed: FATAL:  database "{missing}" does not exist'
    ]
