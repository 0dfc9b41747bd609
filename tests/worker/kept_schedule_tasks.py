"""Two every-second schedules, for the test of `WorkerSettings.kept_schedules`: one kept."""

from __future__ import annotations

from datetime import timedelta

from threadmill_core import task
from threadmill_core.periodic import Schedule, add_schedule, registered_schedules


@task()
def kept_beat() -> str:
    return "kept"


@task(queue="left")
def left_beat() -> str:
    return "left"


def declare() -> None:
    """Declare both schedules in this process (again, if a test forgot them)."""
    for made, name in ((kept_beat, "kept-beat"), (left_beat, "left-beat")):
        add_schedule(made, every=timedelta(seconds=1), catch_up=timedelta(0), name=name)


def only_kept() -> dict[str, Schedule]:
    """The supervisor's `kept_schedules`: ``kept-beat`` alone."""
    return {name: s for name, s in registered_schedules().items() if name == "kept-beat"}
