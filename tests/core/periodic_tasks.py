"""Module-level tasks that the periodic tests give schedules to (declared by each test)."""

from __future__ import annotations

from threadmill_core import TaskContext, task, tick_of

#: What `where_from` saw: the schedule and tick of each run.
seen: list[object] = []


@task()
def poll(region: str = "us") -> str:
    return region


@task()
def where_from(context: TaskContext) -> None:
    seen.append(tick_of(context))


def not_a_task() -> None:
    """A plain function: @periodic refuses it."""
