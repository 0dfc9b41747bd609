"""``manage.py threadmill worker``: threadmill's supervisor, with Django in every process.

The command line is the ``threadmill worker`` command's own (its parser, so
its flags, defaults and checks), with defaults taken from the alias:
``QUEUES`` becomes ``--queues`` and the worker ``OPTIONS`` their flags;
flags given on the command line win. The modules of tasks are every
installed app's ``tasks`` module (found as the admin finds ``admin``
modules) plus those ``OPTIONS["task_modules"]`` and ``--tasks-module``
name; nothing is imported on a record's say-so. Of the schedules those
modules declare, the supervisor's scheduler keeps the alias's only
(`threadmill_django.periodic.alias_schedules`).

The first worker processes are forked from the supervisor once Django is
set up and the tasks imported (so they inherit both); a restarted one is
spawned and configures Django anew: `prepare_process` is the supervisor's
process setup (see `threadmill_core.worker.supervisor.WorkerSettings.setup`), run
in the supervisor and in every spawned worker process before the task
modules are imported. It needs ``DJANGO_SETTINGS_MODULE`` (manage.py sets
it).
"""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Sequence

import django
from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import module_has_submodule

from threadmill_core.cli import arguments
from threadmill_core.cli.arguments import build_parser
from threadmill_core.worker.supervisor import WorkerSettings
from threadmill_django import runner
from threadmill_django.options import BackendOptions
from threadmill_django.periodic import alias_schedules

#: The ``threadmill worker`` options (argparse destinations) `worker_settings` maps.
MAPPED = frozenset(
    {
        "modules", "broker", "queues", "processes", "threads", "prefetch", "lease_ttl",
        "poll_interval", "max_tasks", "max_tasks_jitter", "burst", "shutdown_timeout",
        "connect_timeout", "log_level", "log_format", "spawn", "schedules",
        "metrics_port", "metrics_host", "tracing", "time_limit", "time_limit_grace",
    }
)  # fmt: skip


class WorkerUsageError(Exception):
    """A worker command line or configuration that cannot run; the message says why."""


def discover_task_modules() -> list[str]:
    """Every installed app's ``tasks`` module, in INSTALLED_APPS order (none is imported)."""
    return [
        f"{config.name}.tasks"
        for config in apps.get_app_configs()
        if module_has_submodule(config.module, "tasks")
    ]


def prepare_process(alias: str) -> None:
    """Set up Django in this process, which works for backend `alias`.

    The supervisor's process setup: run first in the supervisor (where
    Django is set up already; the first worker processes are forked from
    it) and in each spawned worker process.
    """
    if not apps.ready:
        if not os.environ.get("DJANGO_SETTINGS_MODULE"):
            raise ImproperlyConfigured(
                "a threadmill worker process configures Django from DJANGO_SETTINGS_MODULE, "
                "which is not set"
            )
        django.setup()
    runner.serve(alias)


def parse_worker_args(
    options: BackendOptions, argv: Sequence[str]
) -> tuple[argparse.Namespace, list[str]]:
    """`argv` parsed by ``threadmill worker``'s parser, with the alias's defaults before it.

    Returns the parsed options and the modules of tasks. argparse errors
    (and ``--help``) exit as they do for ``threadmill worker``.
    """
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--tasks-module", action="append", default=[])
    ours, rest = extra.parse_known_args(list(argv))
    modules = list(
        dict.fromkeys([*discover_task_modules(), *options.task_modules, *ours.tasks_module])
    )
    asking = bool({"-h", "--help"} & set(rest))
    if asking:
        print(
            "manage.py threadmill worker takes the options of `threadmill worker` below, with "
            "the alias's QUEUES and OPTIONS as their defaults, and --tasks-module MODULE "
            "(repeatable); the MODULE list is every installed app's tasks module, found for you.\n"
        )
    if not modules and not asking:
        raise WorkerUsageError(
            "no tasks to run: no installed app has a tasks module, and neither "
            "--tasks-module nor OPTIONS['task_modules'] names one"
        )
    # Modules last: the parser takes them as the positional MODULE list.
    args = build_parser().parse_args(["worker", *options.worker_flags(), *rest, *modules])
    if args.broker is not None:
        raise WorkerUsageError(
            f"the broker is TASKS[{options.alias!r}]'s: choose it with --backend ALIAS, "
            "not --broker"
        )
    return args, modules


def worker_settings(options: BackendOptions, args: argparse.Namespace) -> WorkerSettings:
    """The supervisor's settings, from parsed ``threadmill worker`` options.

    What ``threadmill worker`` makes of them, plus the process setup that
    brings Django up in every process; the broker URL is the alias's, and
    the schedules kept are the alias's (see `threadmill_django.periodic`).
    """
    return arguments.worker_settings(
        args,
        options.broker_url,
        setup=functools.partial(prepare_process, options.alias),
        kept_schedules=functools.partial(alias_schedules, options.alias),
    )
