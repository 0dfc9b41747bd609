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
arguments normalised as Django normalises them; ``manage.py threadmill
worker`` keeps the schedules of the task modules it imports, and
``manage.py threadmill schedules`` lists and steers them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from django.tasks import Task as DjangoTask
from django.tasks import task_backends
from django.tasks.exceptions import InvalidTask

from threadmill_core.periodic import (
    DEFAULT_CATCH_UP,
    InvalidSchedule,
    add_schedule,
    argument_shapes,
)
from threadmill_django.backend import TaskBackend, normalized
from threadmill_django.exceptions import UnsupportedArgument

T = TypeVar("T")


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

    Anything wrong (a task of another backend, arguments Django cannot
    normalise or the function does not take, a bad expression or zone, a
    name taken) raises `threadmill_core.InvalidSchedule`; nothing is kept.
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
        add_schedule(
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
        return made

    return declare
