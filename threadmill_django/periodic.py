"""``@periodic`` for Django tasks: threadmill's schedules on ``@django.tasks.task`` functions.

::

    from datetime import timedelta
    from django.tasks import task
    from threadmill_django import periodic

    @periodic(cron="0 3 * * *", tz="Europe/Berlin")
    @task(queue_name="reports")
    def nightly_report() -> None: ...

Stacked above Django's ``@task`` (or threadmill_django's) of an alias whose
backend is a `threadmill_django.TaskBackend`; the options and guarantees are
`threadmill_core.periodic`'s. Each tick is stored as the alias's
``enqueue`` would store the call (its queue and priority), with the
arguments normalised as Django normalises them.

A schedule belongs to its task's alias (`schedule_alias`): ``manage.py
threadmill [--backend ALIAS] worker`` keeps the schedules of ALIAS among
those the task modules it imports declare, and ``manage.py threadmill
schedules`` and the admin's schedules page of ALIAS list and steer only
those (`alias_schedules`); to them another alias's schedule is no
schedule of theirs. A schedule declared with ``threadmill_core.periodic``
(on a threadmill ``@task``, which has no alias) belongs to the default
alias. Names stay unique in the process, across aliases. The process's
schedule registry (`threadmill_core.periodic.registered_schedules`) is
left as it is: this module remembers each schedule's alias beside it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from django.tasks import DEFAULT_TASK_BACKEND_ALIAS, task_backends
from django.tasks import Task as DjangoTask
from django.tasks.exceptions import InvalidTask

from threadmill_core.periodic import (
    DEFAULT_CATCH_UP,
    InvalidSchedule,
    Schedule,
    add_schedule,
    argument_shapes,
    registered_schedules,
)
from threadmill_django.backend import TaskBackend, normalized
from threadmill_django.exceptions import UnsupportedArgument

T = TypeVar("T")

_lock = threading.Lock()
#: The alias of each schedule declared here, by name, beside the schedule itself: an entry
#: counts while the process's registry holds that schedule under its name.
_aliases: dict[str, tuple[Schedule, str]] = {}


def schedule_alias(schedule: Schedule) -> str:
    """The alias whose workers keep `schedule`: its Django task's, declared with this
    module's `periodic`; the default alias for a schedule declared otherwise (with
    ``threadmill_core.periodic``, on a threadmill ``@task``)."""
    with _lock:
        known = _aliases.get(schedule.name)
    if known is not None and known[0] == schedule:
        return known[1]
    return DEFAULT_TASK_BACKEND_ALIAS


def alias_schedules(alias: str) -> dict[str, Schedule]:
    """The schedules declared in this process that belong to `alias`, by name.

    What ``manage.py threadmill --backend ALIAS worker`` keeps (the
    supervisor calls it once the task modules are imported), and what the
    alias's ``schedules`` command and admin page list and steer.
    """
    return {
        name: schedule
        for name, schedule in registered_schedules().items()
        if schedule_alias(schedule) == alias
    }


def other_alias(name: str, alias: str) -> str | None:
    """The alias a schedule named `name` belongs to, if one is declared here and it is not
    `alias`'s; None otherwise (declared for `alias`, or by no module imported here)."""
    schedule = registered_schedules().get(name)
    if schedule is None:
        return None
    owner = schedule_alias(schedule)
    return None if owner == alias else owner


def periodic(
    *,
    cron: str | None = None,
    tz: str | None = None,
    every: timedelta | None = None,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    name: str | None = None,
    overlap: bool = True,
    catch_up: timedelta = DEFAULT_CATCH_UP,
) -> Callable[[T], T]:
    """Declare a schedule of the Django task below; see `threadmill_core.periodic.periodic`.

    The schedule belongs to the task's alias (see the module doc). Anything
    wrong (a task of another backend, arguments Django cannot normalise or
    the function does not take, a bad expression or zone, a name taken, in
    any alias) raises `threadmill_core.InvalidSchedule`; nothing is kept.
    """

    def declare(made: T) -> T:
        if not isinstance(made, DjangoTask):
            raise InvalidSchedule(
                f"threadmill_django's @periodic goes on a Django task: stack it above "
                f"@django.tasks.task, got {made!r}"
            )
        backend = task_backends[made.backend]
        if not isinstance(backend, TaskBackend):
            raise InvalidSchedule(
                f"{made.module_path}: TASKS[{made.backend!r}] is not a "
                "threadmill_django.TaskBackend, which alone keeps schedules"
            )
        if made.run_after is not None:
            raise InvalidSchedule(f"{made.module_path}: a scheduled task runs at its ticks; "
                                  "it takes no run_after")  # fmt: skip
        shaped_args, shaped_kwargs = argument_shapes(args, kwargs, made.module_path)
        try:
            call_args, call_kwargs = normalized(shaped_args, shaped_kwargs)
            prepared = backend._prepared_for(made)
        except (UnsupportedArgument, InvalidTask, TypeError) as exc:
            raise InvalidSchedule(f"{made.module_path}: {exc}") from None
        with _lock:
            _check_alias(name if name is not None else prepared.template.task_path, made.backend)
            schedule = add_schedule(
                prepared,
                cron=cron,
                tz=tz,
                every=every,
                args=call_args,
                kwargs=call_kwargs,
                name=name,
                overlap=overlap,
                catch_up=catch_up,
            )
            _aliases[schedule.name] = (schedule, made.backend)
        return made

    return declare


def _check_alias(name: object, alias: str) -> None:
    """Refuse schedule `name` of `alias` if the name is declared for another alias (the
    schedules may be alike: the alias is not part of a schedule). Called under `_lock`."""
    known = _aliases.get(name) if isinstance(name, str) else None
    if known is None or known[1] == alias or registered_schedules().get(known[0].name) != known[0]:
        return
    raise InvalidSchedule(
        f"two schedules are named {name!r} (of TASKS[{known[1]!r}] and TASKS[{alias!r}]): "
        "give each a name=, unique in the process"
    )
