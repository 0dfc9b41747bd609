"""threadmill_django's admin pages through Django's test client: permissions, CSRF, LogEntry,
messages, pagination and search, on the default alias's memory backend (`bench`)."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.test import Client, override_settings

from tests.django import admin_bench as ab
from tests.django.bench import Bench
from tests.django.djapp import tasks
from threadmill_core import TaskNotFound, TaskResultStatus, connect
from threadmill_django.admin.reading import PER_PAGE
from threadmill_django.testing import use_broker


@pytest.fixture(autouse=True)
def database() -> Iterator[None]:
    ab.migrate()
    yield
    LogEntry.objects.all().delete()


def client_of(*permissions: str, staff: bool = True, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(ab.user(*permissions, staff=staff))
    return client


def failed_task(bench: Bench, label: str = "x") -> str:
    """A task that failed with a LookupError (its traceback stored); its id."""
    result = tasks.fails_first_time.enqueue(label)
    bench.work()
    assert bench.broker.get_result(result.id).status is TaskResultStatus.FAILED
    return result.id


def status_of(bench: Bench, task_id: str) -> TaskResultStatus:
    return bench.broker.get_result(task_id).status


def messages_of(response: Any) -> list[str]:
    """The Django messages the page shows, as (level, text) would read: "level: text"."""
    return [
        f"{level}: {html.unescape(message)}"
        for level, message in re.findall(r'<li class="(\w+)">(.*?)</li>', ab.text(response))
    ]


# --- permissions ---------------------------------------------------------------------


def test_anonymous_visitors_are_sent_to_the_login_page(bench: Bench) -> None:
    """A visitor who is not logged in is redirected to the admin's login page."""
    response = Client().get(ab.url("changelist"))
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_staff_without_the_view_permission_is_refused(bench: Bench) -> None:
    """Staff without view_taskqueue gets 403 on every page, and no link on the admin index."""
    task_id = failed_task(bench)
    client = client_of()
    for url in (ab.url("changelist"), ab.url("task", "default", task_id),
                ab.url("list", "default", "default", "failed")):  # fmt: skip
        assert client.get(url).status_code == 403, url
    assert ab.url("changelist") not in ab.text(client.get("/admin/"))


def test_a_user_who_is_not_staff_is_sent_to_the_login_page(bench: Bench) -> None:
    """Even with the view permission, a user who is not staff cannot see the pages."""
    response = client_of(ab.VIEW, staff=False).get(ab.url("changelist"))
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_a_viewer_sees_the_task_but_no_action_and_is_refused_the_post(bench: Bench) -> None:
    """With the view permission only: the task's page shows no button, and the POST is 403."""
    task_id = failed_task(bench)
    client = client_of(ab.VIEW)
    page = ab.text(client.get(ab.url("task", "default", task_id)))
    assert "LookupError: x: the first attempt always fails" in page
    assert 'value="Requeue"' not in page
    assert client.post(ab.url("requeue", "default", task_id)).status_code == 403
    assert client.get(ab.url("purge", "default", "default", "failed")).status_code == 403
    assert client.post(ab.url("purge", "default", "default", "failed")).status_code == 403
    assert status_of(bench, task_id) is TaskResultStatus.FAILED
    assert not LogEntry.objects.exists()


def test_the_admin_index_links_the_overview_for_a_viewer(bench: Bench) -> None:
    """The admin index lists "Task queues" under threadmill for a user who may view them."""
    page = ab.text(client_of(ab.VIEW).get("/admin/"))
    assert f'<a href="{ab.url("changelist")}">Task queues</a>' in page


# --- pages ---------------------------------------------------------------------------


def test_the_overview_counts_each_queue_by_status_and_links_the_lists(bench: Bench) -> None:
    """Every configured queue is listed (empty ones at zero), each count linking its list."""
    failed_task(bench)
    tasks.add.enqueue(1, 2)
    page = ab.text(client_of(ab.VIEW).get(ab.url("changelist")))
    for queue in ("default", "high", "low"):
        assert f'<th scope="row">{queue}</th>' in page
    assert f'<a href="{ab.url("list", "default", "default", "failed")}">1</a>' in page
    assert f'<a href="{ab.url("list", "default", "default", "ready")}">1</a>' in page
    assert f'<a href="{ab.url("list", "default", "high", "ready")}">0</a>' in page
    assert "In, last hour" in page


def test_the_task_page_shows_arguments_attempts_workers_and_the_traceback(bench: Bench) -> None:
    """A failed task's page shows its arguments, attempts, worker id and the whole traceback."""
    task_id = failed_task(bench, "the label")
    record = bench.broker.get_result(task_id)
    page = ab.text(client_of(ab.VIEW).get(ab.url("task", "default", task_id)))
    assert "&quot;the label&quot;" in page
    assert '<td id="field-attempts"><pre>1</pre></td>' in page
    assert record.worker_ids[0] in page
    assert "raise LookupError(f&quot;{label}: the first attempt always fails&quot;)" in page
    assert "Traceback (most recent call last)" in page


def test_a_long_argument_is_cut_with_a_marker(bench: Bench) -> None:
    """An argument of a megabyte shows its start and says how much was cut."""
    result = tasks.echo.enqueue("a" * 1_000_000)
    page = ab.text(client_of(ab.VIEW).get(ab.url("task", "default", result.id)))
    assert "more characters; `threadmill show --json ID` shows all]" in page
    assert len(page) < 100_000


def test_a_task_is_found_by_the_end_of_its_id(bench: Bench) -> None:
    """The find box takes the last 8 characters of an id and goes to the task's page."""
    task_id = tasks.add.enqueue(1, 2).id
    response = client_of(ab.VIEW).get(ab.url("find"), {"id": task_id[-8:]})
    assert response.status_code == 302
    assert response["Location"] == ab.url("task", "default", task_id)


def test_an_unknown_task_is_a_404_saying_why(bench: Bench) -> None:
    """A task id no task has answers 404 with the reason."""
    response = client_of(ab.VIEW).get(ab.url("task", "default", "0" * 36))
    assert response.status_code == 404
    assert "no such task" in ab.text(response)


def test_the_list_is_paginated_and_clamps_past_its_last_page(bench: Bench) -> None:
    """250 tasks show as pages of 100, 100 and 50; a page past the last shows the last."""
    bench.broker.enqueue_many(ab.core_task(tasks.add), [((i, i), {}) for i in range(250)])
    client = client_of(ab.VIEW)
    url = ab.url("list", "default", "default", "ready")
    first = ab.text(client.get(url))
    assert first.count('<th scope="row"><a href=') == PER_PAGE
    assert "250 tasks, page 1 of 3" in first
    last = ab.text(client.get(url, {"p": 99}))
    assert last.count('<th scope="row"><a href=') == 50
    assert "250 tasks, page 3 of 3" in last


def test_the_list_is_searched_by_task_name_and_by_id(bench: Bench) -> None:
    """A search matches the task name anywhere in it, or the id's start or end."""
    tasks.add.enqueue(1, 2)
    wanted = tasks.echo.enqueue("e")
    client = client_of(ab.VIEW)
    url = ab.url("list", "default", "default", "ready")
    by_name = ab.text(client.get(url, {"q": "djapp.tasks:ECHO"}))
    assert by_name.count('<th scope="row"><a href=') == 1
    assert wanted.id in by_name
    by_id = ab.text(client.get(url, {"q": wanted.id[-6:]}))
    assert by_id.count('<th scope="row"><a href=') == 1
    assert wanted.id in by_id


# --- actions -------------------------------------------------------------------------


def test_requeue_is_done_logged_and_reported(bench: Bench) -> None:
    """Requeueing a FAILED task makes it READY, writes a LogEntry and says so."""
    task_id = failed_task(bench)
    client = client_of(ab.CHANGE)
    response = client.post(ab.url("requeue", "default", task_id), follow=True)
    assert response.status_code == 200
    assert messages_of(response) == [f"success: Task {task_id} requeued."]
    assert status_of(bench, task_id) is TaskResultStatus.READY
    entry = LogEntry.objects.get()
    assert entry.action_flag == CHANGE
    assert entry.object_id == f"default:task:{task_id}"
    assert entry.change_message == f"requeued: task {task_id} is READY"
    assert entry.get_admin_url() == ab.url("change", entry.object_id)
    assert client.get(entry.get_admin_url())["Location"] == ab.url("task", "default", task_id)


def test_a_refused_requeue_says_why_and_logs_nothing(bench: Bench) -> None:
    """Requeueing a READY task is refused with the reason as an error message, not logged."""
    task_id = tasks.add.enqueue(1, 2).id
    response = client_of(ab.CHANGE).post(ab.url("requeue", "default", task_id), follow=True)
    assert messages_of(response) == [
        f"error: Task {task_id} not requeued: it is READY: already waiting to run."
    ]
    assert status_of(bench, task_id) is TaskResultStatus.READY
    assert not LogEntry.objects.exists()


def test_cancel_cancels_a_pending_task(bench: Bench) -> None:
    """Cancelling a READY task makes it CANCELLED, logged and reported."""
    task_id = tasks.add.enqueue(1, 2).id
    client = client_of(ab.CHANGE)
    page = ab.text(client.get(ab.url("task", "default", task_id)))
    assert 'value="Cancel this task"' in page
    response = client.post(ab.url("cancel", "default", task_id), follow=True)
    assert messages_of(response) == [f"success: Task {task_id} cancelled."]
    assert status_of(bench, task_id) is TaskResultStatus.CANCELLED
    assert LogEntry.objects.get().change_message == f"cancelled: task {task_id} is CANCELLED"


def test_an_action_without_the_csrf_token_is_refused(bench: Bench) -> None:
    """A POST without the CSRF token is 403 and changes nothing."""
    task_id = failed_task(bench)
    client = client_of(ab.CHANGE, csrf=True)
    assert client.post(ab.url("requeue", "default", task_id)).status_code == 403
    assert status_of(bench, task_id) is TaskResultStatus.FAILED
    assert not LogEntry.objects.exists()


def test_an_action_by_get_is_not_allowed(bench: Bench) -> None:
    """Requeue answers GET with 405: actions are POSTs only."""
    task_id = failed_task(bench)
    assert client_of(ab.CHANGE).get(ab.url("requeue", "default", task_id)).status_code == 405
    assert status_of(bench, task_id) is TaskResultStatus.FAILED


def test_purge_asks_naming_the_count_then_purges(bench: Bench) -> None:
    """The purge page names how many tasks go; its POST purges them, logged and reported."""
    ids = [tasks.add.enqueue(i, i).id for i in range(3)]
    kept = tasks.note.enqueue("other queue").id
    client = client_of(ab.CHANGE)
    url = ab.url("purge", "default", "default", "ready")
    assert "Purge the 3 READY tasks of queue “default”" in ab.text(client.get(url))
    assert all(status_of(bench, i) is TaskResultStatus.READY for i in ids)
    response = client.post(url, follow=True)
    assert messages_of(response) == ["success: Purged 3 READY task(s) of 'default'."]
    for task_id in ids:
        with pytest.raises(TaskNotFound):
            bench.broker.get_result(task_id)
    assert status_of(bench, kept) is TaskResultStatus.READY
    entry = LogEntry.objects.get()
    assert (entry.object_id, entry.change_message) == (
        "default:queue:default",
        "purged 3 READY task(s) of queue 'default'",
    )


def test_running_tasks_cannot_be_purged(bench: Bench) -> None:
    """Purging RUNNING is refused with the reason; the list offers no purge link."""
    client = client_of(ab.CHANGE)
    response = client.post(ab.url("purge", "default", "default", "running"), follow=True)
    assert messages_of(response) == [
        "error: Nothing purged: RUNNING cannot be purged: "
        "a running task belongs to its lease holder."
    ]
    assert ab.url("purge", "default", "default", "running") not in ab.text(response)
    assert not LogEntry.objects.exists()


def test_the_overview_shows_every_threadmill_alias_and_no_other(bench: Bench) -> None:
    """Each alias served by threadmill_django has its section (one with wrong settings shows
    its problem); an alias of another backend, or of one that does not import, has none."""
    setting = {
        "default": {"BACKEND": "threadmill_django.TaskBackend", "QUEUES": ["default"]},
        "reports": {"BACKEND": "threadmill_django.TaskBackend", "QUEUES": ["monthly"],
                    "OPTIONS": {"url": "memory://"}},
        "wrong": {"BACKEND": "threadmill_django.TaskBackend", "OPTIONS": {"thread": 8}},
        "immediate": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"},
        "broken": {"BACKEND": "no.such.Backend"},
    }  # fmt: skip
    with override_settings(TASKS=setting):
        page = ab.text(client_of(ab.VIEW).get(ab.url("changelist")))
    assert '<div class="module" id="alias-default">' in page
    assert '<div class="module" id="alias-reports">' in page
    assert '<th scope="row">monthly</th>' in page
    assert "TASKS[&#x27;wrong&#x27;][&#x27;OPTIONS&#x27;][&#x27;thread&#x27;]" in page
    assert "alias-immediate" not in page
    assert "alias-broken" not in page


def test_the_breadcrumbs_are_drawn_as_the_admin_draws_its_own(bench: Bench) -> None:
    """The breadcrumbs use the installed Django admin's markup (a list from 6.1, a line
    before), ending at the page itself."""
    client = client_of(ab.VIEW)
    own = re.search(
        r'<(\w+) class="breadcrumbs">', ab.text(client.get("/admin/threadmill_django/"))
    )
    assert own is not None
    page = ab.text(client.get(ab.url("list", "default", "default", "failed")))
    ours = re.search(r'<(\w+) class="breadcrumbs">(.*?)</\1>', page, re.S)
    assert ours is not None
    assert ours.group(1) == own.group(1)
    assert f'<a href="{ab.url("changelist")}">Task queues</a>' in ours.group(2)
    assert (
        ours.group(2)
        .rstrip()
        .endswith("default · default · FAILED" + ("</li>" if own.group(1) == "ol" else ""))
    )


def test_a_backend_that_cannot_be_reached_answers_503_saying_so(bench: Bench) -> None:
    """With the alias's server down, a list answers 503 with the backend's error, and the
    overview shows the error in that alias's place."""
    broker = connect("redis://127.0.0.1:9/0?socket_timeout=0.5")  # nothing listens there
    client = client_of(ab.VIEW)
    with use_broker("default", broker):
        listed = client.get(ab.url("list", "default", "default", "failed"))
        overview = ab.text(client.get(ab.url("changelist")))
    broker.close()
    assert listed.status_code == 503
    assert "127.0.0.1:9" in ab.text(listed)
    assert '<p class="errornote">' in overview
    assert "127.0.0.1:9" in overview


def test_the_shipped_migration_matches_the_model() -> None:
    """``makemigrations --check`` finds nothing to add for threadmill_django."""
    from django.core.management import call_command

    call_command("makemigrations", "threadmill_django", check=True, dry_run=True, verbosity=0)


def test_migrate_creates_the_two_permissions() -> None:
    """After ``migrate``, view_taskqueue and change_taskqueue exist, and nothing else of
    threadmill_django's (no add or delete: the pages neither add nor delete)."""
    from django.contrib.auth.models import Permission

    ab.migrate()
    codenames = Permission.objects.filter(content_type__app_label="threadmill_django")
    assert sorted(p.codename for p in codenames) == [ab.CHANGE, ab.VIEW]
