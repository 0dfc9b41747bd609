"""The heartbeat thread's upkeep and forced stops, as pure functions of the schedule.

One rule each: which running tasks a `Mark` records and when, that a task
decided first is never marked, that a mark that did not get through is made
again for the tasks still running, that the first start after an idle look
wakes the heartbeat thread, that a stopping worker's prefetch goes back even
while its only thread runs a task, and what a forced stop saves and
abandons. The simulation in test_scheduler.py checks them in every
interleaving.
"""

from __future__ import annotations

import pytest

from tests.worker.test_scheduler import POLL, held_task, outcomes, settings, tasks
from threadmill_core import scheduler
from threadmill_core.held import Outcome
from threadmill_core.scheduler import (
    EXIT,
    MARK_DELAY,
    Calls,
    Mark,
    Release,
    Run,
    Running,
    Schedule,
    Wait,
)


def upkeep(
    schedule: Schedule, *, now: float = 100.0, stopping: bool = False
) -> tuple[Mark | Release | Wait | None, Schedule]:
    return scheduler.next_upkeep(schedule, settings(), now=now, stopping=stopping)


def started(schedule: Schedule, *, now: float, held: int = 6) -> tuple[Run, Schedule]:
    """The next task thread's step, which must be a Run."""
    step, after = scheduler.next_step(schedule, settings(), now=now, stopping=False, held=held)
    assert isinstance(step, Run), step
    return step, after


def test_a_started_task_is_running_until_its_outcome_comes_back() -> None:
    """Run records the task as running since now; its outcome takes it out, whatever the order."""
    first, second = tasks(2)
    schedule = Schedule(ready=(first, second))
    _, schedule = started(schedule, now=10.0)
    _, schedule = started(schedule, now=11.0)
    assert schedule.running == (Running(10.0, first), Running(11.0, second))
    schedule, _ = scheduler.finished(schedule, settings(), Outcome(second, None), now=12.0)
    assert schedule.running == (Running(10.0, first),)
    schedule, _ = scheduler.finished(schedule, settings(), Outcome(first, None), now=13.0)
    assert schedule.running == ()


def test_a_task_that_has_run_the_mark_delay_is_marked_once() -> None:
    """Younger than MARK_DELAY: wait until it is that old; then one Mark; then nothing more."""
    task = held_task()
    schedule = Schedule(running=(Running(100.0, task),))
    step, same = upkeep(schedule, now=100.0 + MARK_DELAY / 4)
    assert step == Wait(pytest.approx(MARK_DELAY * 3 / 4))
    assert same == schedule
    step, after = upkeep(schedule, now=100.0 + MARK_DELAY)
    assert step == Mark((task,))
    assert after.running == (Running(100.0, task, marked=True),)
    assert upkeep(after, now=105.0)[0] is None  # marked: nothing more to do for it


def test_one_mark_takes_every_task_old_enough_and_waits_for_the_others() -> None:
    """Tasks that have run the delay go in one call; the youngest waits its turn."""
    old, older, young = tasks(3)
    running = (Running(100.0, older), Running(100.05, old), Running(100.19, young))
    step, after = upkeep(Schedule(running=running), now=100.05 + MARK_DELAY)
    assert step == Mark((older, old))
    step, _ = upkeep(after, now=100.05 + MARK_DELAY)
    assert step == Wait(pytest.approx(0.14))


def test_a_task_decided_within_the_delay_is_never_marked() -> None:
    """A short task's outcome comes first: no mark at all (a decision implies the start)."""
    task = held_task()
    _, schedule = started(Schedule(ready=(task,)), now=100.0)
    schedule, _ = scheduler.finished(schedule, settings(), Outcome(task, None), now=100.05)
    step, _ = upkeep(schedule, now=200.0)
    assert step is None


def test_a_drain_of_short_tasks_makes_no_mark() -> None:
    """One thread running a hundred tasks of 10 ms back to back: the heartbeat thread, looking
    between every two of them, never has a task to mark."""
    given = settings(threads=1, prefetch=100)
    schedule = Schedule(ready=tasks(100))
    now, held, marks = 100.0, 100, []
    while schedule.ready:
        step, schedule = scheduler.next_step(schedule, given, now=now, stopping=False, held=held)
        assert isinstance(step, Run), step
        look, schedule = scheduler.next_upkeep(schedule, given, now=now + 0.005, stopping=False)
        marks.append(look)
        now += 0.01
        schedule, _ = scheduler.finished(schedule, given, Outcome(step.task, None), now=now)
        schedule = schedule._replace(unsent=())  # acknowledged meanwhile
        held -= 1
    assert not [look for look in marks if isinstance(look, Mark)]
    assert all(look == Wait(pytest.approx(MARK_DELAY - 0.005)) for look in marks)


def test_a_mark_that_did_not_get_through_is_made_again_for_the_tasks_still_running() -> None:
    """Backend unavailable: the tasks still running are marked again later; one that ended
    meanwhile needs no mark."""
    running, ended = tasks(2)
    schedule = Schedule(running=(Running(100.0, running), Running(100.0, ended)))
    step, schedule = upkeep(schedule, now=101.0)
    assert step == Mark((running, ended))
    schedule, _ = scheduler.finished(schedule, settings(), Outcome(ended, None), now=101.1)
    after = scheduler.marked(schedule, (running, ended), reached=False, broken=False)
    assert after.running == (Running(100.0, running, marked=False),)
    assert upkeep(after, now=101.2)[0] == Mark((running,))
    assert scheduler.marked(schedule, (running, ended), reached=True, broken=False) == schedule
    # A worker that broke down (our own error) does not try again.
    assert scheduler.marked(schedule, (running, ended), reached=False, broken=True) == schedule


def test_no_mark_during_a_backoff() -> None:
    """While the backend is unavailable, the heartbeat thread waits for `retry_at` too."""
    schedule = Schedule(running=(Running(100.0, held_task()),), calls=Calls(retry_at=101.5))
    assert upkeep(schedule, now=101.0)[0] == Wait(pytest.approx(0.5))


def test_the_first_start_after_an_idle_look_wakes_the_heartbeat_thread() -> None:
    """Nothing to mark: the thread waits for its next beat, and the next Run says to wake it,
    once."""
    step, schedule = upkeep(Schedule(ready=tasks(2)))
    assert step is None
    assert schedule.calls.marker_idle
    assert upkeep(schedule)[1] is schedule  # looking again changes nothing
    run, schedule = started(schedule, now=100.0)
    assert run.wake_marker
    assert not schedule.calls.marker_idle
    again, _ = started(schedule, now=100.01)
    assert not again.wake_marker


def test_a_stopping_worker_gives_back_its_prefetch_from_the_heartbeat_thread() -> None:
    """With its only thread running a task, the prefetch still goes back at once, in one
    call; not while a release is on its way."""
    ready, waiting = tasks(3), tasks(1)
    schedule = Schedule(
        ready=ready, running=(Running(100.0, held_task()),), calls=Calls(give_back=waiting)
    )
    step, after = upkeep(schedule, stopping=True)
    assert step == Release(waiting + ready)
    assert (after.ready, after.calls.give_back, after.calls.releasing) == ((), (), True)
    assert upkeep(schedule._replace(calls=Calls(releasing=True)), stopping=True)[0] != Release(
        ready
    )
    assert upkeep(schedule, stopping=False)[0] != Release(ready)


def test_a_forced_stop_saves_the_prefetch_and_the_outcomes_and_abandons_the_running() -> None:
    """forced_stop hands over the prefetch and the outcomes not sent, for one call each, lists
    the running tasks, and every thread exits at its next step."""
    ready, waiting, unsent = tasks(2), tasks(1), outcomes(2)
    running = (Running(99.0, held_task(), marked=True), Running(99.9, held_task()))
    schedule = Schedule(
        ready=ready,
        running=running,
        unsent=unsent,
        unsent_since=99.5,
        calls=Calls(give_back=waiting, acknowledging=True),
    )
    stop, after = scheduler.forced_stop(schedule)
    assert stop == scheduler.ForcedStop(give_back=waiting + ready, outcomes=unsent, running=running)
    assert (after.ready, after.unsent, after.calls.give_back) == ((), (), ())
    assert after.calls.exiting
    given = settings()
    assert scheduler.next_step(after, given, now=100.0, stopping=True, held=5)[0] == EXIT
    assert upkeep(after, stopping=True)[0] is None  # no more marks, no more releases
    # A call in flight that then fails is not tried again: the run is over.
    dropped = outcomes(1)
    again, lost = scheduler.acknowledged(after, dropped, reached=False, broken=False, now=100.0)
    assert (again.unsent, lost) == ((), dropped)
    back = tasks(1)
    again, lost = scheduler.released(after, back, reached=False, broken=False)
    assert (again.calls.give_back, lost) == ((), back)


def test_a_wait_for_a_mark_is_never_longer_than_needed_nor_zero() -> None:
    """The heartbeat thread sleeps exactly until the oldest unmarked task is due."""
    task = held_task()
    for age in (0.0, 0.01, MARK_DELAY - 0.001):
        step, _ = upkeep(Schedule(running=(Running(100.0, task),)), now=100.0 + age)
        assert isinstance(step, Wait)
        assert 0.0 < step.seconds == pytest.approx(MARK_DELAY - age)
        assert step.seconds <= POLL
