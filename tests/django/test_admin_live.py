"""The admin's schedules and live workers pages through Django's test client: what they show,
who may see and act, and that pause, resume and run-now change what is stored."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.tasks import task
from django.test import Client

from tests.django import admin_bench as ab
from tests.django.bench import Bench, two_aliases
from tests.django.djapp import tasks
from threadmill_core import TaskResultStatus
from threadmill_core.live_workers import RunningTask, WorkerInfo
from threadmill_core.periodic import registered_schedules, unregister_schedule
from threadmill_core.worker.scheduling import Scheduler
from threadmill_django import periodic

NAME = "nightly-add"


@pytest.fixture(autouse=True)
def database() -> Iterator[None]:
    ab.migrate()
    for name in registered_schedules():
        unregister_schedule(name)
    yield
    LogEntry.objects.all().delete()
    for name in registered_schedules():
        unregister_schedule(name)


def client_of(*permissions: str, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(ab.user(*permissions))
    return client


def messages_of(response: Any) -> list[str]:
    return [
        f"{level}: {html.unescape(message)}"
        for level, message in re.findall(r'<li class="(\w+)">(.*?)</li>', ab.text(response))
    ]


def declare() -> None:
    periodic(cron="0 3 * * *", tz="Europe/Berlin", args=[1, 2], name=NAME)(tasks.add)


def paused(bench: Bench) -> bool:
    pause = bench.broker.backend.schedule_pauses().get(NAME)
    return bool(pause and pause.paused)


def row_of(page: str, name: str = NAME) -> str:
    found = re.search(rf'<tr id="schedule-{name}">(.*?)</tr>', page, re.S)
    assert found, page
    return found.group(1)


def test_the_overview_links_each_alias_schedules_and_workers(bench: Bench) -> None:
    """The overview links the default alias's schedules and live workers pages."""
    page = ab.text(client_of(ab.VIEW).get(ab.url("changelist")))
    assert f'href="{ab.url("schedules", "default")}"' in page
    assert f'href="{ab.url("workers", "default")}"' in page


def test_a_viewer_sees_a_schedule_with_its_last_tick_but_cannot_pause_it(bench: Bench) -> None:
    """A viewer sees name, task, expression, zone, next tick and the last tick stored with
    its status; no action button, and a POST to pause is 403 and stores nothing."""
    periodic(every=timedelta(minutes=5), args=[3, 4], catch_up=timedelta(0), name="every-five")(
        tasks.add
    )
    declare()
    Scheduler(bench.broker.backend, registered_schedules().values()).run_pass(
        bench.broker.backend.now()
    )
    client = client_of(ab.VIEW)
    page = ab.text(client.get(ab.url("schedules", "default")))
    nightly = row_of(page)
    for shown in ("tests.django.djapp.tasks:add", "0 3 * * *", "Europe/Berlin"):
        assert shown in nightly
    assert '<td class="paused">no</td>' in nightly
    ticked = row_of(page, "every-five")
    [stored] = bench.broker.backend.peek("default", TaskResultStatus.READY)
    assert f'<a href="{ab.url("task", "default", stored.id)}">READY</a>' in ticked
    assert 'value="Pause"' not in page
    assert 'value="Run now"' not in page
    assert client.post(ab.url("pause_schedule", "default", NAME)).status_code == 403
    assert not paused(bench)
    assert not LogEntry.objects.exists()


def test_staff_without_the_view_permission_is_refused_both_pages(bench: Bench) -> None:
    """Staff without view_taskqueue gets 403 on the schedules and the workers pages."""
    client = client_of()
    for page in ("schedules", "workers"):
        assert client.get(ab.url(page, "default")).status_code == 403


def test_pause_and_resume_are_stored_logged_and_reported(bench: Bench) -> None:
    """Pause stores the pause in the backend, logs it and says so; the page then offers
    Resume, which clears it."""
    declare()
    client = client_of(ab.CHANGE)
    response = client.post(ab.url("pause_schedule", "default", NAME), follow=True)
    assert paused(bench)
    [message] = messages_of(response)
    assert message.startswith(f"success: Schedule {NAME!r} paused (since ")
    assert '<td class="paused">yes</td>' in row_of(ab.text(response))
    assert 'value="Resume"' in row_of(ab.text(response))
    entry = LogEntry.objects.get()
    assert entry.object_id == f"default:schedule:{NAME}"
    assert client.get(entry.get_admin_url())["Location"] == ab.url("schedules", "default")
    client.post(ab.url("resume_schedule", "default", NAME))
    assert not paused(bench)
    assert LogEntry.objects.count() == 2


def test_a_pause_without_the_csrf_token_is_refused(bench: Bench) -> None:
    """A pause POSTed without the CSRF token is 403 and stores nothing; GET is 405."""
    declare()
    client = client_of(ab.CHANGE, csrf=True)
    assert client.post(ab.url("pause_schedule", "default", NAME)).status_code == 403
    assert client.get(ab.url("pause_schedule", "default", NAME)).status_code == 405
    assert not paused(bench)


def test_a_name_that_cannot_be_a_schedule_is_refused_saying_why(bench: Bench) -> None:
    """Pausing a 201-character name is refused with the rule as an error; nothing stored."""
    name = "x" * 201
    response = client_of(ab.CHANGE).post(ab.url("pause_schedule", "default", name), follow=True)
    [message] = messages_of(response)
    assert message.startswith("error: Schedule not paused: a schedule's name is a non-empty")
    assert bench.broker.backend.schedule_pauses() == {}
    assert not LogEntry.objects.exists()


def test_run_now_enqueues_one_run_of_the_schedule(bench: Bench) -> None:
    """Run now enqueues the schedule's task with its arguments, logged under the new task."""
    declare()
    response = client_of(ab.CHANGE).post(ab.url("run_schedule", "default", NAME), follow=True)
    [stored] = bench.broker.backend.peek("default", TaskResultStatus.READY)
    assert stored.task_path == "tests.django.djapp.tasks:add"
    assert stored.args == [1, 2]
    assert messages_of(response) == [f"success: Schedule {NAME!r} run now as task {stored.id}."]
    assert LogEntry.objects.get().object_id == f"default:task:{stored.id}"


def test_run_now_of_an_undeclared_schedule_is_refused(bench: Bench) -> None:
    """A name no task module declares cannot be run: an error message, nothing enqueued."""
    response = client_of(ab.CHANGE).post(ab.url("run_schedule", "default", "ghost"), follow=True)
    assert messages_of(response) == ["error: Schedule 'ghost' not run: no task module declares it."]
    assert bench.broker.backend.peek("default", TaskResultStatus.READY) == []


def test_an_alias_page_lists_and_steers_its_own_schedules_only(bench: Bench) -> None:
    """With two aliases, each schedules page lists its alias's schedules; pausing, resuming
    or running another alias's schedule on it is refused, and stores nothing."""
    with two_aliases(bench) as emails:
        digest = task(backend="emails")(tasks.send_digest)
        periodic(every=timedelta(minutes=5), name="emails-digest")(digest)
        declare()
        client = client_of(ab.CHANGE)
        page = ab.text(client.get(ab.url("schedules", "default")))
        assert 'id="schedule-nightly-add"' in page
        assert "emails-digest" not in page
        page = ab.text(client.get(ab.url("schedules", "emails")))
        assert 'id="schedule-emails-digest"' in page
        assert NAME not in page
        for verb, done in (("pause", "not paused"), ("resume", "not resumed"), ("run", "")):
            response = client.post(ab.url(f"{verb}_schedule", "default", "emails-digest"),
                                   follow=True)  # fmt: skip
            [message] = messages_of(response)
            assert message.startswith("error: Schedule ")
            assert done in message
            assert "no schedule 'emails-digest' in TASKS['default'] (it is TASKS['emails']'s)" in (
                message
            )
        assert bench.broker.backend.schedule_pauses() == {}
        assert bench.broker.backend.peek("default", TaskResultStatus.READY) == []
        assert not LogEntry.objects.exists()
        client.post(ab.url("run_schedule", "emails", "emails-digest"))
        [run] = emails.backend.peek("default", TaskResultStatus.READY)
        assert run.task_path == "tests.django.djapp.tasks:send_digest"


def test_a_registered_worker_appears_with_its_running_task_linked(bench: Bench) -> None:
    """A worker registered in the backend is listed with its host, pid, queues, threads,
    version and last seen, and its running task links to the task's page."""
    client = client_of(ab.VIEW)
    assert "No live workers." in ab.text(client.get(ab.url("workers", "default")))
    task_id = tasks.add.enqueue(1, 2).id
    backend = bench.broker.backend
    info = WorkerInfo(id="w-admin-1", host="box-7", pid=4242, queues=("default", "high"),
                      threads=3, version="9.9.9", started_at=backend.now(),
                      running=(RunningTask(task_id, "tests.django.djapp.tasks:add"),))  # fmt: skip
    backend.register_worker(info, timedelta(minutes=1))
    page = ab.text(client.get(ab.url("workers", "default")))
    row = re.search(r'<tr id="worker-w-admin-1">(.*?)</tr>', page, re.S)
    assert row, page
    for shown in ("box-7", "4242", "default, high", ">3<", "9.9.9", "s ago)"):
        assert shown in row.group(1), shown
    assert f'<a href="{ab.url("task", "default", task_id)}">' in row.group(1)
