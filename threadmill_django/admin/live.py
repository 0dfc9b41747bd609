"""The schedules and live workers pages of `TaskQueueAdmin`, one of each per alias.

Under ``<admin>/threadmill_django/taskqueue/<alias>/``:

- ``schedules/``: every ``@periodic`` schedule of the alias that the
  installed apps' task modules declare (`threadmill_django.periodic.
  alias_schedules`), and every name paused or resumed in the alias's
  backend, as ``manage.py threadmill schedules`` lists them (name, task,
  expression, time zone, next tick, the last tick stored and its status,
  paused);
- ``schedules/<name>/pause/``, ``.../resume/``, ``.../run/``: POST only,
  change permission; pausing is stored in the backend for every worker, a
  run is enqueued now under an id of its own; a schedule of another alias
  is refused, as no schedule of this one;
- ``workers/``: the live worker processes, as ``threadmill workers`` lists
  them, each running task linking to its page.

Both read through `threadmill_core.cli.inspector` (`schedule_rows`,
`live_workers`), as the commands do; the actions are `set_paused` and
`run_now`, logged and reported as the other actions are.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.contrib.admin.utils import unquote
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.views.decorators.http import require_POST

from threadmill_core.cli.inspector import live_workers, run_now, schedule_rows, set_paused
from threadmill_core.errors import ThreadmillError
from threadmill_core.periodic import Schedule
from threadmill_core.worker.startup import import_task_modules
from threadmill_django.backend import TaskBackend
from threadmill_django.periodic import alias_schedules, other_alias

if TYPE_CHECKING:
    from threadmill_django.admin.pages import TaskQueueAdmin

TEMPLATES = "threadmill_django/admin/"


def declared_schedules(backend: TaskBackend) -> tuple[dict[str, Schedule], str]:
    """The alias's schedules this process knows once the task modules are imported (the
    installed apps' ``tasks`` modules and the alias's ``task_modules``, as ``manage.py
    threadmill schedules`` imports them), and why a module could not be imported ("" if
    none)."""
    from threadmill_django.worker import discover_task_modules

    modules = [*discover_task_modules(), *backend.options_checked.task_modules]
    try:
        import_task_modules(list(dict.fromkeys(modules)))
    except ThreadmillError as exc:
        return alias_schedules(backend.alias), f"{type(exc).__name__}: {exc}"
    return alias_schedules(backend.alias), ""


def elsewhere(backend: TaskBackend, name: str) -> str:
    """Why schedule `name` is no schedule of the backend's alias ("" if it may be): it is
    another alias's."""
    declared_schedules(backend)  # the task modules imported, so every alias's are known
    owner = other_alias(name, backend.alias)
    if owner is None:
        return ""
    return f"no schedule {name!r} in TASKS[{backend.alias!r}] (it is TASKS[{owner!r}]'s)"


def live_urls(admin: TaskQueueAdmin, wrap: Any, name: str) -> list[URLPattern]:
    """The pages' URL patterns, named as `TaskQueueAdmin.url` finds them; `wrap` makes a
    view an admin view."""

    def view(page: Any) -> Any:
        return functools.update_wrapper(functools.partial(page, admin), page)

    schedule = "<str:alias>/schedules/<str:schedule>/"
    return [
        path("<str:alias>/schedules/", wrap(view(schedules_view)), name=f"{name}_schedules"),
        path("<str:alias>/workers/", wrap(view(workers_view)), name=f"{name}_workers"),
        *(
            path(
                f"{schedule}{verb}/",
                wrap(require_POST(view(action))),
                name=f"{name}_{verb}_schedule",
            )
            for verb, action in ACTIONS.items()
        ),
    ]


def schedules_view(admin: TaskQueueAdmin, request: HttpRequest, alias: str) -> HttpResponse:
    """The alias's schedules, with pause, resume and run-now for users who may change."""
    admin.must_view(request)
    backend = admin.backend(alias)
    declared, problem = declared_schedules(backend)
    rows = [
        {
            "row": row,
            "urls": {
                verb: admin.url(f"{verb}_schedule", backend.alias, row.name)
                for verb in ("pause", "resume", "run")
            },
            "last_url": admin.url("task", backend.alias, row.last_id) if row.last_id else "",
        }
        for row in schedule_rows(backend.broker, declared)
    ]
    title = f"Schedules ({backend.alias})"
    return TemplateResponse(
        request,
        TEMPLATES + "schedules.html",
        admin.context(
            request, title, [(title, "")], alias=backend.alias, rows=rows, problem=problem
        ),
    )


def workers_view(admin: TaskQueueAdmin, request: HttpRequest, alias: str) -> HttpResponse:
    """The alias's live workers and the tasks each runs now."""
    admin.must_view(request)
    backend = admin.backend(alias)
    read = live_workers(backend.broker)
    workers = [
        {
            "info": info,
            "seen": None
            if info.last_seen is None
            else max((read.now - info.last_seen).total_seconds(), 0.0),
            "running": [(task, admin.url("task", backend.alias, task.id)) for task in info.running],
        }
        for info in read.workers
    ]
    title = f"Live workers ({backend.alias})"
    return TemplateResponse(
        request,
        TEMPLATES + "workers.html",
        admin.context(request, title, [(title, "")], alias=backend.alias, workers=workers),
    )


def pause_schedule_view(
    admin: TaskQueueAdmin, request: HttpRequest, alias: str, schedule: str
) -> HttpResponse:
    """Pause a schedule for every worker of the alias (POST, change permission)."""
    return steer(admin, request, alias, schedule, paused=True)


def resume_schedule_view(
    admin: TaskQueueAdmin, request: HttpRequest, alias: str, schedule: str
) -> HttpResponse:
    """Resume a schedule: ticks from now on, none caught up (POST, change permission)."""
    return steer(admin, request, alias, schedule, paused=False)


def steer(
    admin: TaskQueueAdmin, request: HttpRequest, alias: str, schedule: str, *, paused: bool
) -> HttpResponse:
    admin.must_change(request)
    backend = admin.backend(alias)
    name = unquote(schedule)
    done = "paused" if paused else "resumed"
    back = admin.url("schedules", backend.alias)
    refusal = elsewhere(backend, name)
    if refusal:
        messages.error(request, f"Schedule not {done}: {refusal}.")
        return HttpResponseRedirect(back)
    try:
        state = set_paused(backend.broker, name, paused)
    except ValueError as exc:
        messages.error(request, f"Schedule not {done}: {exc}.")
        return HttpResponseRedirect(back)
    since = state.since.isoformat()
    admin.log(request, f"{backend.alias}:schedule:{name}", f"{done} schedule {name!r}")
    messages.success(request, f"Schedule {name!r} {done} (since {since}).")
    return HttpResponseRedirect(back)


def run_schedule_view(
    admin: TaskQueueAdmin, request: HttpRequest, alias: str, schedule: str
) -> HttpResponse:
    """Enqueue one run of a declared schedule now (POST, change permission)."""
    admin.must_change(request)
    backend = admin.backend(alias)
    name = unquote(schedule)
    back = admin.url("schedules", backend.alias)
    declared, _problem = declared_schedules(backend)
    found = declared.get(name)
    if found is None:
        refusal = elsewhere(backend, name) or "no task module declares it"
        messages.error(request, f"Schedule {name!r} not run: {refusal}.")
        return HttpResponseRedirect(back)
    record = run_now(backend.broker, found)
    admin.log(request, f"{backend.alias}:task:{record.id}", f"ran schedule {name!r} now")
    messages.success(request, f"Schedule {name!r} run now as task {record.id}.")
    return HttpResponseRedirect(back)


#: The schedule actions by the verb of their URL.
ACTIONS = {
    "pause": pause_schedule_view,
    "resume": resume_schedule_view,
    "run": run_schedule_view,
}
