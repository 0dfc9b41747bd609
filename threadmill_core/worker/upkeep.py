"""The heartbeat thread's upkeep, and forced stops: pure functions of the worker's schedule.

Start marks. Only an attempt that ran is charged, so the backend is told
which claimed tasks started (`Backend.mark_started`), but not by the task
threads: a task thread running a long task (the only one, with one thread)
could not. The worker's heartbeat thread asks `next_upkeep` instead: a
`Mark` of every task that has run for `Settings.mark_delay` without its
start recorded, in one call, or how long until one has. A task whose
outcome comes first is never marked (a decision implies the start), so a
drain of short tasks makes no mark at all, and long tasks cost one call
per delay, not one per task.

Outcomes. The same thread sends outcomes left waiting past
`Settings.ack_delay` (`Acknowledge`) and gives a stopping worker's
prefetch back (`Release`): with every task thread running a task (the only
one, with one thread), no task thread would before its task ends, and a
kill meanwhile would run a finished task again. `Calls.upkeep_at` says
when it looks next: within `Settings.ack_delay` while a task runs
unmarked, so that the outcomes a start leaves behind need no wake in a
drain; a `Run` that leaves a mark or an outcome due sooner wakes it
(`Run.wake_upkeep`), at most once per look, never once per task.

Forced stops. `forced_stop` takes what can still be saved in two calls
(the prefetch, to give back, and the outcomes waiting) and ends the run;
the running tasks are abandoned (`ForcedStop`).

The simulation in tests/worker/test_scheduler.py checks these rules
together with the task threads' steps, in every interleaving.
"""

from __future__ import annotations

from typing import NamedTuple

import attrs

from threadmill_core.worker.held import HeldTask, Outcome
from threadmill_core.worker.scheduler import (
    Acknowledge,
    Release,
    Running,
    Schedule,
    Settings,
    Wait,
)


@attrs.frozen
class Mark:
    """The heartbeat thread's step: record that `tasks` started, in one call, then `marked`."""

    tasks: tuple[HeldTask, ...]


class ForcedStop(NamedTuple):
    """What a forced stop (`forced_stop`) still saves, and what it abandons."""

    #: Prefetched tasks never started, to give back in one call.
    give_back: tuple[HeldTask, ...]
    #: Outcomes that have not been sent, to send in one call.
    outcomes: tuple[Outcome, ...]
    #: Tasks abandoned while running: their leases will expire.
    running: tuple[Running, ...]


# --- the heartbeat thread's upkeep ----------------------------------------------------


def next_upkeep(
    schedule: Schedule, settings: Settings, *, now: float, stopping: bool
) -> tuple[Mark | Release | Acknowledge | Wait | None, Schedule]:
    """The heartbeat thread's next step besides renewals, and the schedule it leaves.

    First, a stopping worker's prefetch goes back (`Release`, as a task
    thread would give it back, but with one thread busy running a task no
    task thread is free to). Then the outcomes that have waited
    `Settings.ack_delay` (`Acknowledge`; a task thread that gets there first
    sends them instead). Then a `Mark` of every running task that has run
    `Settings.mark_delay` or longer with its start not recorded (they count
    as marked from now on, see `marked`). Else a `Wait` until the first of
    these falls due (at most `Settings.ack_delay` while a task runs
    unmarked), or until the backoff of an outage ends; else None: the
    thread waits for its next beat, or until a `Run` wakes it
    (`Run.wake_upkeep`), as does `Worker.stop`. `Calls.upkeep_at` records
    when it looks next (now, after a call: it looks again once that is done).
    """
    ready, running, unsent, since, c = schedule
    if c.exiting:
        return None, schedule
    if now < c.retry_at:
        at, step = c.retry_at, Wait(c.retry_at - now)
    elif stopping and (ready or c.give_back) and not c.releasing:
        calls = c._replace(give_back=(), releasing=True, upkeep_at=now)
        return Release(c.give_back + ready), Schedule(
            ready=(), running=running, unsent=unsent, unsent_since=since, calls=calls
        )
    elif unsent and not c.acknowledging and now - since >= settings.ack_delay:
        calls = c._replace(acknowledging=True, upkeep_at=now)
        return Acknowledge(unsent), Schedule(
            ready=ready, running=running, unsent=(), unsent_since=since, calls=calls
        )
    else:
        due, ack_delay = now - settings.mark_delay, settings.ack_delay
        waiting = [entry for entry in running if not entry.marked]
        tasks = tuple(entry.task for entry in waiting if entry.since <= due)
        if tasks:
            flagged, calls = _flag(running, tasks), c._replace(upkeep_at=now)
            return Mark(tasks), Schedule(
                ready=ready, running=flagged, unsent=unsent, unsent_since=since, calls=calls
            )
        # While a task runs unmarked, a look every ack_delay at least: the outcomes its
        # start may leave behind then need no wake (a drain: a look each 10 ms, not a wake
        # per batch); a long task costs ten looks, then its mark, then none.
        waits = [min(min(entry.since for entry in waiting) - due, ack_delay)] if waiting else []
        if unsent and not c.acknowledging:
            waits.append(ack_delay - (now - since))  # > 0: not due above
        if not waits:
            at, step = float("inf"), None
        else:
            seconds = min(waits)
            at, step = now + seconds, Wait(seconds)
    if at == c.upkeep_at:
        return step, schedule
    return step, schedule._replace(calls=c._replace(upkeep_at=at))


def marked(
    schedule: Schedule, tasks: tuple[HeldTask, ...], *, reached: bool, broken: bool
) -> Schedule:
    """A `Mark` of `tasks` ended. Not sent (the backend is unavailable), those still running
    are marked again once it is back; the others ended meanwhile, and need none. A `broken`
    worker (an error of its own) does not try again: unmarked, they go back uncharged if
    their leases lapse."""
    if reached or broken:
        return schedule
    return schedule._replace(running=_flag(schedule.running, tasks, marked=False))


def _flag(
    running: tuple[Running, ...], tasks: tuple[HeldTask, ...], *, marked: bool = True
) -> tuple[Running, ...]:
    chosen = {id(task) for task in tasks}
    return tuple(
        entry._replace(marked=marked) if id(entry.task) in chosen else entry for entry in running
    )


# --- a forced stop ---------------------------------------------------------------------


def forced_stop(schedule: Schedule) -> tuple[ForcedStop, Schedule]:
    """The worker must stop now (a second signal, a shutdown timeout): what it still saves
    and abandons, and the schedule that ends the run.

    The prefetch (never started) and the outcomes not sent leave the
    schedule, for one call each; the running tasks are abandoned. Every
    thread exits at its next step, and calls in flight that fail are not
    tried again.
    """
    ready, running, unsent, since, c = schedule
    stop = ForcedStop(give_back=c.give_back + ready, outcomes=unsent, running=running)
    calls = c._replace(give_back=(), exiting=True)
    return stop, Schedule(running=running, unsent_since=since, calls=calls)
