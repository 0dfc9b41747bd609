"""``manage.py threadmill [--backend ALIAS] COMMAND [ARGS...]``: threadmill's CLI on an alias.

``worker`` runs threadmill's supervisor with Django in every process (see
`threadmill_django.worker`), and keeps the alias's ``@periodic`` schedules
among those its task modules declare. ``stats``, ``workers``, ``ls``, ``show``,
``requeue``, ``cancel``, ``purge``, ``inspect`` and ``schedules`` (which imports
the task modules first) are the ``threadmill`` command's own,
run on the alias's broker: the same output, ``--json`` and exit codes, by
construction. ``schedules`` and ``inspect`` know the alias's schedules only
(`threadmill_django.periodic.alias_schedules`): pausing, resuming or running
another alias's schedule is refused (exit 3, nothing done) as no schedule of
this alias. Django's options (``--settings``, ``--verbosity``) go before
COMMAND; everything after it is the threadmill command's.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.tasks import DEFAULT_TASK_BACKEND_ALIAS, task_backends
from django.tasks.exceptions import InvalidTaskBackend

from threadmill_core import cli
from threadmill_core.cli.exit_codes import ExitCode
from threadmill_core.errors import ThreadmillError
from threadmill_core.worker.logs import configure_worker_logging
from threadmill_core.worker.startup import import_task_modules
from threadmill_core.worker.supervisor import Supervisor
from threadmill_django.backend import TaskBackend
from threadmill_django.periodic import alias_schedules, other_alias
from threadmill_django.worker import (
    WorkerUsageError,
    discover_task_modules,
    parse_worker_args,
    worker_settings,
)

INSPECTING = (
    "stats", "workers", "ls", "show", "requeue", "cancel", "purge", "inspect", "schedules",
)  # fmt: skip


class Command(BaseCommand):
    help = (
        "threadmill's commands on a Django task backend alias: worker runs tasks; stats, "
        "workers, ls, show, requeue, cancel, purge, inspect and schedules look at the queues, "
        "workers and schedules and steer them, as the threadmill command does. "
        "`manage.py threadmill COMMAND --help` explains each."
    )
    # The worker runs the checks itself; the inspecting commands only read and steer.
    requires_system_checks: list[str] = []  # noqa: RUF012  # Django's own attribute, a list

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--backend",
            default=DEFAULT_TASK_BACKEND_ALIAS,
            metavar="ALIAS",
            help="the TASKS alias whose broker to use (default: %(default)s)",
        )
        parser.add_argument("subcommand", choices=("worker", *INSPECTING), metavar="COMMAND")
        parser.add_argument("arguments", nargs=argparse.REMAINDER, metavar="ARGS")

    def handle(self, *_args: Any, backend: str, subcommand: str, arguments: list[str],
               **_options: Any) -> None:  # fmt: skip
        try:
            chosen = task_backends[backend]
        except InvalidTaskBackend as exc:
            raise CommandError(str(exc), returncode=2) from exc
        if not isinstance(chosen, TaskBackend):
            raise CommandError(
                f"TASKS[{backend!r}] is a {type(chosen).__module__}.{type(chosen).__qualname__}, "
                "not a threadmill_django.TaskBackend",
                returncode=2,
            )
        try:
            options = chosen.options_checked
        except InvalidTaskBackend as exc:
            raise CommandError(str(exc), returncode=2) from exc
        if subcommand == "worker":
            code = self._worker(chosen, arguments)
        else:
            if {"--broker", "-b"} & set(arguments) or any(
                a.startswith("--broker=") for a in arguments
            ):
                raise CommandError(
                    f"the broker is TASKS[{options.alias!r}]'s: choose it with --backend ALIAS, "
                    "not --broker",
                    returncode=2,
                )
            try:
                broker = chosen.broker
            except ThreadmillError as exc:  # as `threadmill` says a URL that cannot work
                print(f"threadmill: {exc}", file=sys.stderr)
                sys.exit(2)
            if subcommand == "schedules":  # the schedules are declared by the task modules
                import_task_modules([*discover_task_modules(), *options.task_modules])
                _refuse_another_alias(options.alias, arguments)
            code = cli.main(
                [subcommand, *arguments],
                broker=broker,
                schedules=functools.partial(alias_schedules, options.alias),
            )
        if code:
            sys.exit(code)

    def _worker(self, backend: TaskBackend, arguments: list[str]) -> int:
        self.check()
        if not os.environ.get("DJANGO_SETTINGS_MODULE"):
            raise CommandError(
                "the worker's processes are spawned and configure Django from "
                "DJANGO_SETTINGS_MODULE, which is not set (manage.py sets it)",
                returncode=2,
            )
        try:
            args, _modules = parse_worker_args(backend.options_checked, arguments)
            settings = worker_settings(backend.options_checked, args)
        except (WorkerUsageError, ThreadmillError) as exc:
            raise CommandError(str(exc), returncode=2) from exc
        configure_worker_logging(args.log_level, args.log_format)
        return Supervisor(settings).run()


def _refuse_another_alias(alias: str, arguments: list[str]) -> None:
    """Exit 3 (nothing done) if ``schedules pause|resume|run NAME`` names a schedule of
    another alias: to `alias` it is no schedule of its own."""
    words = [word for word in arguments if not word.startswith("-")]  # --json, --help
    if len(words) < 2 or words[0] not in ("pause", "resume", "run"):
        return
    owner = other_alias(words[1], alias)
    if owner is not None:
        print(
            f"threadmill schedules {words[0]}: no schedule {words[1]!r} in TASKS[{alias!r}] "
            f"(it is TASKS[{owner!r}]'s: use --backend {owner})",
            file=sys.stderr,
        )
        sys.exit(ExitCode.NOTHING_DONE)
