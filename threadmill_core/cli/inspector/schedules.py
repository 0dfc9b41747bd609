"""Reading and steering the `@periodic` schedules, and reading the live workers.

What ``threadmill schedules``, ``threadmill workers``, the TUI and the
Django admin share. `schedule_rows` lists the schedules a process knows
(those `declared`, as `threadmill_core.periodic.registered_schedules`
gives them, and every name with a pause state stored in the backend);
`set_paused` and `run_now` steer one; `live_workers` reads
`Backend.workers` with the backend's clock, for "last seen" ages.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import attrs

from threadmill_core.models import TaskResult, TaskResultStatus
from threadmill_core.pauses import SchedulePause, check_schedule_name

if TYPE_CHECKING:
    from threadmill_core.broker import Broker
    from threadmill_core.live_workers import WorkerInfo
    from threadmill_core.periodic import Schedule

#: How many ticks back a row looks for the last one stored.
LOOK_BACK = 10


@attrs.frozen(kw_only=True)
class ScheduleRow:
    """One schedule as listed; the fields from code are None for a name only the backend
    knows (paused or resumed there, not declared by the modules imported here)."""

    name: str
    task: str | None = None
    expression: str | None = None
    tz: str | None = None
    next_tick: datetime | None = None
    #: The latest tick (of the last `LOOK_BACK`) whose task is stored, its task's id and
    #: status now.
    last_tick: datetime | None = None
    last_id: str | None = None
    last_status: TaskResultStatus | None = None
    paused: bool = False

    @property
    def declared(self) -> bool:
        return self.task is not None


def schedule_rows(broker: Broker, declared: Mapping[str, Schedule]) -> list[ScheduleRow]:
    """One row per schedule, by name: `declared`, and every name with a stored pause state.

    Costs one read of the pause states and, per declared schedule, up to
    `LOOK_BACK` reads of a task by id.
    """
    from threadmill_core.periodic import tick_id

    backend = broker.backend
    now = backend.now()
    pauses = backend.schedule_pauses()
    found = []
    for name in sorted(set(declared) | set(pauses)):
        schedule = declared.get(name)
        pause = pauses.get(name)
        paused = bool(pause and pause.paused)
        if schedule is None:
            found.append(ScheduleRow(name=name, paused=paused))
            continue
        last_tick = last_id = last_status = None
        tick: datetime | None = schedule.previous_tick(now + timedelta(milliseconds=1))
        for _ in range(LOOK_BACK):
            if tick is None:
                break
            record = backend.get(tick_id(name, tick))
            if record is not None:
                last_tick, last_id, last_status = tick, record.id, record.status
                break
            tick = schedule.previous_tick(tick)
        found.append(
            ScheduleRow(
                name=name,
                task=schedule.task_path,
                expression=schedule.expression,
                tz=schedule.tz,
                next_tick=schedule.next_tick(now),
                last_tick=last_tick,
                last_id=last_id,
                last_status=last_status,
                paused=paused,
            )
        )
    return found


def set_paused(broker: Broker, name: str, paused: bool) -> SchedulePause:
    """Pause (or resume) schedule `name` for every scheduler of the backend; its new state.

    A name that cannot name a schedule raises `ValueError` before anything
    is stored; a name no module declares is paused all the same.
    """
    check_schedule_name(name)
    return broker.backend.set_schedule_paused(name, paused)


def run_now(broker: Broker, schedule: Schedule) -> TaskResult:
    """Enqueue one run of `schedule` now, under an id of its own (not a tick's); the record."""
    from threadmill_core.backend import call_record
    from threadmill_core.periodic import run_id

    backend = broker.backend
    call = (run_id(schedule.name, backend.now()), list(schedule.args), dict(schedule.kwargs))
    [stored] = backend.enqueue([call_record(schedule.template, call)])
    return stored


@attrs.frozen
class LiveWorkers:
    """The workers registered in the backend, and the backend's clock when they were read."""

    workers: tuple[WorkerInfo, ...]
    now: datetime


def live_workers(broker: Broker) -> LiveWorkers:
    """The live workers (`Backend.workers`), read-only, with the backend's clock."""
    backend = broker.backend
    return LiveWorkers(tuple(backend.workers()), backend.now())
