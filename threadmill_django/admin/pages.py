"""`TaskQueueAdmin`: the admin pages of every threadmill alias, on the `TaskQueue` model's URLs.

Under ``<admin>/threadmill_django/taskqueue/``:

- ``""``: the overview (the model's changelist, so the admin index links it);
- ``find/?id=...``: the task with that id, or whose id starts or ends so;
- ``<alias>/queues/<queue>/<status>/?p=N&q=...``: a page of a segment, or of a search;
- ``<alias>/queues/<queue>/<status>/purge/``: the confirmation (GET) and the purge (POST);
- ``<alias>/tasks/<id>/``: one task; ``.../requeue/`` and ``.../cancel/`` act (POST);
- ``<alias>/schedules/`` and ``<alias>/workers/``: see `threadmill_django.admin.live`.

Path parts are quoted as the admin quotes primary keys (``/`` reads ``_2F``).
Viewing needs staff and ``threadmill_django.view_taskqueue`` (or the change
permission); acting needs ``threadmill_django.change_taskqueue``, else 403.
Every action is a POST under the admin's CSRF protection, is logged as a
`LogEntry` of `TaskQueue` (object id ``alias:task:ID``, ``alias:queue:NAME``
for a purge, ``alias:schedule:NAME`` for a pause or resume), and says what
it did, or what was refused and why, as a Django message. Reads go through
`threadmill_core.cli.inspector` only.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import django
from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.utils import quote, unquote
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from threadmill_core.checks import check_purgeable
from threadmill_core.cli.inspector import STATUSES, Report, cancel, find_task, requeue
from threadmill_core.errors import PayloadError, ThreadmillError
from threadmill_core.models import TaskResult, TaskResultStatus
from threadmill_django.admin import reading
from threadmill_django.admin.display import error_text, listed_row, task_fields
from threadmill_django.admin.live import live_urls
from threadmill_django.backend import TaskBackend
from threadmill_django.models import TaskQueue

TEMPLATES = "threadmill_django/admin/"
#: Statuses a task may be requeued from, and cancelled from.
REQUEUEABLE = (TaskResultStatus.FAILED, TaskResultStatus.CANCELLED)
CANCELLABLE = (TaskResultStatus.READY, TaskResultStatus.DEFERRED)
#: A `Report`'s action as the messages say it was done.
PAST = {"requeue": "requeued", "cancel": "cancelled"}


if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[TaskQueue]
else:  # ModelAdmin is generic only in django-stubs
    _ModelAdmin = admin.ModelAdmin


class TaskQueueAdmin(_ModelAdmin):
    """Pages of threadmill's queues in place of a changelist; nothing is added or deleted."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        name = f"{self.opts.app_label}_{self.opts.model_name}"

        def wrap(view: Any) -> Any:
            return self.admin_site.admin_view(self.reporting_outages(view))

        segment = "<str:alias>/queues/<str:queue>/<str:status>/"
        task = "<str:alias>/tasks/<str:task_id>/"
        return [
            path("", wrap(self.overview_view), name=f"{name}_changelist"),
            path("find/", wrap(self.find_view), name=f"{name}_find"),
            path(segment, wrap(self.list_view), name=f"{name}_list"),
            path(f"{segment}purge/", wrap(self.purge_view), name=f"{name}_purge"),
            path(task, wrap(self.task_view), name=f"{name}_task"),
            path(f"{task}requeue/", wrap(require_POST(self.requeue_view)), name=f"{name}_requeue"),
            path(f"{task}cancel/", wrap(require_POST(self.cancel_view)), name=f"{name}_cancel"),
            *live_urls(self, wrap, name),
            # What the admin's "Recent actions" links to: the task (or queue) logged.
            path("<str:object_id>/change/", wrap(self.logged_view), name=f"{name}_change"),
        ]

    # --- helpers ---------------------------------------------------------------------

    def reporting_outages(self, view: Any) -> Any:
        """`view`, answering 503 with the backend's error when threadmill cannot be read or
        acted on (its server down, say), instead of a server error."""

        @functools.wraps(view)
        def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            try:
                response: HttpResponse = view(request, *args, **kwargs)
            except ThreadmillError as exc:
                title = "The task backend cannot be reached"
                return TemplateResponse(
                    request,
                    TEMPLATES + "unavailable.html",
                    self.context(
                        request, title, [(title, "")], problem=f"{type(exc).__name__}: {exc}"
                    ),
                    status=503,
                )
            return response

        return guarded

    def url(self, page: str, *parts: str) -> str:
        """The URL of one of these pages, its parts quoted as the admin quotes keys."""
        name = f"{self.opts.app_label}_{self.opts.model_name}_{page}"
        return reverse(f"admin:{name}", args=[quote(p) for p in parts])

    def context(
        self,
        request: HttpRequest,
        title: str,
        crumbs: list[tuple[str, str]] | None,
        **extra: Any,
    ) -> dict[str, Any]:
        """What every page's template gets; `crumbs` are the breadcrumbs past the overview
        (text, URL; no URL for the page itself), None on the overview."""
        overview = ("Task queues", "" if crumbs is None else self.url("changelist"))
        trail = [
            ("Home", reverse("admin:index")),
            (
                str(self.opts.app_config.verbose_name),
                reverse("admin:app_list", kwargs={"app_label": self.opts.app_label}),
            ),
            overview,
            *(crumbs or []),
        ]
        return {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": title,
            "trail": trail,
            "breadcrumbs_as_list": django.VERSION >= (6, 1),
            "can_change": self.has_change_permission(request),
            **extra,
        }

    def must_view(self, request: HttpRequest) -> None:
        if not self.has_view_permission(request):
            raise PermissionDenied

    def must_change(self, request: HttpRequest) -> None:
        if not self.has_change_permission(request):
            raise PermissionDenied

    def backend(self, alias: str) -> TaskBackend:
        backend = reading.backend_of(unquote(alias))
        if backend is None or backend.settings is None:
            raise Http404(f"no threadmill alias {unquote(alias)!r} with valid settings")
        return backend

    def segment(self, queue: str, status: str) -> tuple[str, TaskResultStatus]:
        try:
            return unquote(queue), TaskResultStatus(status.upper())
        except ValueError:
            raise Http404(f"no status {status!r}") from None

    def log(self, request: HttpRequest, object_id: str, message: str) -> None:
        """A `LogEntry` of `TaskQueue` for the user's action on `object_id`."""
        LogEntry.objects.create(
            user_id=request.user.pk,
            content_type=ContentType.objects.get_for_model(TaskQueue, for_concrete_model=False),
            object_id=object_id,
            object_repr=object_id[:200],
            action_flag=CHANGE,
            change_message=message,
        )

    def back(self, request: HttpRequest, default: str) -> HttpResponseRedirect:
        """To the page the form named (``next``), if it is on this site, else `default`."""
        wanted = request.POST.get("next", "")
        safe = url_has_allowed_host_and_scheme(
            wanted, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        )
        return HttpResponseRedirect(wanted if wanted and safe else default)

    # --- pages -----------------------------------------------------------------------

    def overview_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        """Every alias's queues with counts by status and the last hour's rates."""
        self.must_view(request)
        aliases = []
        for alias in reading.served_aliases():
            backend = reading.backend_of(alias)
            assert backend is not None
            read = reading.alias_overview(alias, backend)
            rows = [
                {
                    "stats": stats,
                    "cells": [
                        (stats.counts.of(s), self.url("list", alias, stats.queue, s.value.lower()))
                        for s in STATUSES
                    ],
                }
                for stats in read.queues
            ]
            aliases.append(
                {
                    "read": read,
                    "rows": rows,
                    "schedules_url": self.url("schedules", alias),
                    "workers_url": self.url("workers", alias),
                }
            )
        return TemplateResponse(
            request,
            TEMPLATES + "overview.html",
            self.context(
                request,
                "Task queues",
                None,
                aliases=aliases,
                statuses=[s.value for s in STATUSES],
                find_url=self.url("find"),
            ),
        )

    def find_view(self, request: HttpRequest) -> HttpResponse:
        """The task whose id is, or starts or ends with, ``?id=``, in any alias."""
        self.must_view(request)
        given = request.GET.get("id", "").strip()
        found: list[tuple[str, TaskResult]] = []
        for alias in reading.served_aliases():
            backend = reading.backend_of(alias)
            if backend is None or backend.settings is None or not given:
                continue
            try:
                matches = find_task(backend.broker, given).matches
            except PayloadError:
                return HttpResponseRedirect(self.url("task", alias, given))
            found.extend((alias, record) for record in matches)
        if len(found) == 1:
            alias, record = found[0]
            return HttpResponseRedirect(self.url("task", alias, record.id))
        rows = [
            {"alias": alias, "url": self.url("task", alias, record.id), "record": record}
            for alias, record in found
        ]
        title = f"Tasks matching {given!r}" if given else "Find a task"
        return TemplateResponse(
            request,
            TEMPLATES + "found.html",
            self.context(
                request, title, [(title, "")], given=given, found=rows, find_url=self.url("find")
            ),
            status=200 if rows or not given else 404,
        )

    def list_view(self, request: HttpRequest, alias: str, queue: str, status: str) -> HttpResponse:
        """A page of one segment, or of the tasks in it matching ``?q=``."""
        self.must_view(request)
        backend = self.backend(alias)
        queue_name, state = self.segment(queue, status)
        query = request.GET.get("q", "").strip()
        try:
            number = int(request.GET.get("p", "1"))
        except ValueError:
            number = 1
        broker = backend.broker
        if query:
            page = reading.search_segment(broker, queue_name, state, query, number)
        else:
            page = reading.segment_page(broker, queue_name, state, number)
        here = self.url("list", backend.alias, queue_name, status.lower())
        rows = [
            listed_row(item, self.url("task", backend.alias, item.id))
            if isinstance(item, TaskResult)
            else listed_row(item, "")
            for item in page.items
        ]

        def page_url(n: int) -> str:
            return f"{here}?{urlencode({'p': n, **({'q': query} if query else {})})}"

        near = range(max(1, page.number - 3), min(page.pages, page.number + 3) + 1)
        purgeable = state is not TaskResultStatus.RUNNING and self.has_change_permission(request)
        return TemplateResponse(
            request,
            TEMPLATES + "task_list.html",
            self.context(
                request,
                f"{state.value} tasks of {queue_name!r} ({backend.alias})",
                [(f"{backend.alias} · {queue_name} · {state.value}", "")],
                alias=backend.alias,
                queue=queue_name,
                status=state.value,
                page=page,
                rows=rows,
                query=query,
                here=here,
                pages=[(n, page_url(n)) for n in near],
                first_url=page_url(1),
                last_url=page_url(page.pages),
                purge_url=self.url("purge", backend.alias, queue_name, status.lower())
                if purgeable
                else "",
                segments=[
                    (s.value, self.url("list", backend.alias, queue_name, s.value.lower()))
                    for s in STATUSES
                ],
            ),
        )

    def task_view(self, request: HttpRequest, alias: str, task_id: str) -> HttpResponse:
        """One task: its arguments, return value, errors with tracebacks, attempts, times."""
        self.must_view(request)
        backend = self.backend(alias)
        given = unquote(task_id)
        try:
            found = find_task(backend.broker, given)
        except PayloadError as exc:
            return TemplateResponse(
                request,
                TEMPLATES + "task.html",
                self.context(
                    request,
                    f"Task {given}",
                    [(f"Task {given}", "")],
                    alias=backend.alias,
                    poison=str(exc),
                ),
            )
        if found.task_id is not None and found.task_id != given:
            return HttpResponseRedirect(self.url("task", backend.alias, found.task_id))
        if found.task_id is None:
            reason = found.ambiguity() if found.matches else "no such task (never enqueued, "
            reason += "" if found.matches else "purged, or its result expired)"
            return TemplateResponse(
                request,
                TEMPLATES + "task.html",
                self.context(
                    request,
                    f"Task {given}",
                    [(f"Task {given}", "")],
                    alias=backend.alias,
                    missing=reason,
                ),
                status=404,
            )
        record = found.matches[0]
        list_url = self.url("list", backend.alias, record.queue, record.status.value.lower())
        return TemplateResponse(
            request,
            TEMPLATES + "task.html",
            self.context(
                request,
                f"Task {record.id}",
                [
                    (f"{backend.alias} · {record.queue} · {record.status.value}", list_url),
                    (f"Task {record.id}", ""),
                ],
                alias=backend.alias,
                record=record,
                fields=task_fields(record),
                errors=[error_text(error) for error in record.errors],
                list_url=list_url,
                requeue_url=self.url("requeue", backend.alias, record.id)
                if record.status in REQUEUEABLE
                else "",
                cancel_url=self.url("cancel", backend.alias, record.id)
                if record.status in CANCELLABLE
                else "",
            ),
        )

    # --- actions ---------------------------------------------------------------------

    def requeue_view(self, request: HttpRequest, alias: str, task_id: str) -> HttpResponse:
        """Requeue one FAILED or CANCELLED task (POST, change permission)."""
        return self.act(request, alias, task_id, requeue)

    def cancel_view(self, request: HttpRequest, alias: str, task_id: str) -> HttpResponse:
        """Cancel one READY or DEFERRED task (POST, change permission)."""
        return self.act(request, alias, task_id, cancel)

    def act(self, request: HttpRequest, alias: str, task_id: str, action: Any) -> HttpResponse:
        self.must_change(request)
        backend = self.backend(alias)
        given = unquote(task_id)
        report: Report = action(backend.broker, [given])
        outcome = report.outcomes[0]
        done = PAST[report.action]
        if outcome.done:
            assert outcome.record is not None
            text = f"{done}: task {outcome.task_id} is {outcome.record.status.value}"
            self.log(request, f"{backend.alias}:task:{outcome.task_id}", text)
            messages.success(request, f"Task {outcome.task_id} {done}.")
        else:
            messages.error(request, f"Task {outcome.task_id} not {done}: {outcome.reason}.")
        return self.back(request, self.url("task", backend.alias, outcome.task_id))

    def purge_view(self, request: HttpRequest, alias: str, queue: str, status: str) -> HttpResponse:
        """A confirmation naming how many tasks go (GET); the purge (POST). Change permission."""
        self.must_change(request)
        backend = self.backend(alias)
        queue_name, state = self.segment(queue, status)
        list_url = self.url("list", backend.alias, queue_name, status.lower())
        try:
            check_purgeable(state)
        except ValueError as exc:
            messages.error(request, f"Nothing purged: {exc}.")
            return HttpResponseRedirect(list_url)
        if request.method == "POST":
            purged = backend.broker.purge(queue_name, state)
            text = f"purged {purged} {state.value} task(s) of queue {queue_name!r}"
            self.log(request, f"{backend.alias}:queue:{queue_name}", text)
            messages.success(request, f"Purged {purged} {state.value} task(s) of {queue_name!r}.")
            return HttpResponseRedirect(list_url)
        count = reading.segment_count(backend.broker, queue_name, state)
        return TemplateResponse(
            request,
            TEMPLATES + "purge_confirmation.html",
            self.context(
                request,
                "Are you sure?",
                [(f"{backend.alias} · {queue_name} · {state.value}", list_url), ("Purge", "")],
                alias=backend.alias,
                queue=queue_name,
                status=state.value,
                count=count,
                list_url=list_url,
            ),
        )

    def logged_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Where a `LogEntry` links: ``alias:task:ID`` to the task, ``alias:schedule:NAME``
        to the alias's schedules, ``alias:queue:NAME`` to the overview (a queue's page needs
        a status)."""
        self.must_view(request)
        alias, _, rest = unquote(object_id).partition(":")
        backend = reading.backend_of(alias)
        if backend is None or not rest:
            raise Http404(f"nothing logged as {unquote(object_id)!r}")
        kind, _, name = rest.partition(":")
        if kind == "task" and name:
            return HttpResponseRedirect(self.url("task", alias, name))
        if kind == "schedule" and name:
            return HttpResponseRedirect(self.url("schedules", alias))
        return HttpResponseRedirect(self.url("changelist"))
