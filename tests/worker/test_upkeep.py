"""The heartbeat thread's upkeep and forced stops, as pure functions of the schedule.

One rule each: which running tasks a `Mark` records and when, that a task
decided first is never marked, that a mark that did not get through is made
again for the tasks still running, that the first start after an idle look
wakes the heartbeat thread, that outcomes left behind by a start are sent
by it once due (and a drain wakes it once per batch, not per task), that a
stopping worker's prefetch goes back even while its only thread runs a
task, and what a forced stop saves and abandons. The simulation in
test_scheduler.py checks them in every interleaving.
"""

from __future__ import annotations

import pytest

from tests.worker.test_scheduler import POLL, held_task, outcomes, settings, tasks
from threadmill_core.worker import scheduler
from threadmill_core.worker.held import Outcome
from threadmill_core.worker.scheduler import (
    ACK_DELAY,
    EXIT,
    MARK_DELAY,
    Acknowledge,
    Calls,
    Release,
    Run,
    Running,
    Schedule,
    Wait,
)
from threadmill_core.worker.upkeep import ForcedStop, Mark, forced_stop, marked, next_upkeep


def upkeep(
    schedule: Schedule, *, now: float = 100.0, stopping: bool = False
) -> tuple[Mark | Release | Acknowledge | Wait | None, Schedule]:
    return next_upkeep(schedule, settings(), now=now, stopping=stopping)


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
    assert step == Wait(pytest.approx(min(MARK_DELAY * 3 / 4, ACK_DELAY)))  # see the drain
    assert same.running == schedule.running
    assert same.calls.upkeep_at == pytest.approx(100.0 + MARK_DELAY / 4 + step.seconds)
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
    assert step == Wait(pytest.approx(min(0.14, ACK_DELAY)))


def test_a_task_decided_within_the_delay_is_never_marked() -> None:
    """A short task's outcome comes first: no mark at all (a decision implies the start)."""
    task = held_task()
    _, schedule = started(Schedule(ready=(task,)), now=100.0)
    schedule, _ = scheduler.finished(schedule, settings(), Outcome(task, None), now=100.05)
    step, after = upkeep(schedule, now=200.0)
    assert step == Acknowledge(schedule.unsent)  # its outcome, left waiting, goes; no mark
    sent, _ = scheduler.acknowledged(after, step.outcomes, reached=True, broken=False, now=200.0)
    assert upkeep(sent, now=200.0)[0] is None


def test_a_drain_of_short_tasks_makes_no_mark() -> None:
    """One thread running a hundred tasks of 10 ms back to back: the heartbeat thread, looking
    between every two of them, never has a task to mark; it looks again every ACK_DELAY while
    a task runs, so that the outcomes a start leaves behind need no wake."""
    given = settings(threads=1, prefetch=100)
    schedule = Schedule(ready=tasks(100))
    now, held, marks = 100.0, 100, []
    while schedule.ready:
        step, schedule = scheduler.next_step(schedule, given, now=now, stopping=False, held=held)
        assert isinstance(step, Run), step
        look, schedule = next_upkeep(schedule, given, now=now + 0.005, stopping=False)
        marks.append(look)
        now += 0.01
        schedule, _ = scheduler.finished(schedule, given, Outcome(step.task, None), now=now)
        schedule = schedule._replace(unsent=())  # acknowledged meanwhile
        held -= 1
    assert not [look for look in marks if isinstance(look, Mark)]
    assert all(look == Wait(pytest.approx(ACK_DELAY)) for look in marks)


def test_a_mark_that_did_not_get_through_is_made_again_for_the_tasks_still_running() -> None:
    """Backend unavailable: the tasks still running are marked again later; one that ended
    meanwhile needs no mark."""
    running, ended = tasks(2)
    schedule = Schedule(running=(Running(100.0, running), Running(100.0, ended)))
    step, schedule = upkeep(schedule, now=101.0)
    assert step == Mark((running, ended))
    schedule, _ = scheduler.finished(schedule, settings(), Outcome(ended, None), now=101.1)
    schedule = schedule._replace(unsent=())  # acknowledged meanwhile
    after = marked(schedule, (running, ended), reached=False, broken=False)
    assert after.running == (Running(100.0, running, marked=False),)
    assert upkeep(after, now=101.2)[0] == Mark((running,))
    assert marked(schedule, (running, ended), reached=True, broken=False) == schedule
    # A worker that broke down (our own error) does not try again.
    assert marked(schedule, (running, ended), reached=False, broken=True) == schedule


def test_no_mark_during_a_backoff() -> None:
    """While the backend is unavailable, the heartbeat thread waits for `retry_at` too."""
    schedule = Schedule(running=(Running(100.0, held_task()),), calls=Calls(retry_at=101.5))
    assert upkeep(schedule, now=101.0)[0] == Wait(pytest.approx(0.5))


def test_the_first_start_after_an_idle_look_wakes_the_heartbeat_thread() -> None:
    """Nothing to mark: the thread waits for its next beat, and the next Run says to wake it,
    once."""
    step, schedule = upkeep(Schedule(ready=tasks(2)))
    assert step is None
    assert schedule.calls.upkeep_at == float("inf")
    assert upkeep(schedule)[1] is schedule  # looking again changes nothing
    run, schedule = started(schedule, now=100.0)
    assert run.wake_upkeep
    assert schedule.calls.upkeep_at == 100.0  # woken, it looks at once
    again, _ = started(schedule, now=100.01)
    assert not again.wake_upkeep


def looks_until_sent(
    schedule: Schedule, now: float, given: scheduler.Settings
) -> tuple[float, Acknowledge, Schedule]:
    """The heartbeat thread's looks, each when the last said (`Calls.upkeep_at`), from `now`
    until it sends outcomes: when it sends them, the step, and the schedule."""
    for _ in range(20):
        look, schedule = next_upkeep(schedule, given, now=now, stopping=False)
        if isinstance(look, Acknowledge):
            return now, look, schedule
        assert isinstance(look, Wait), look
        now = schedule.calls.upkeep_at
    pytest.fail("the heartbeat thread never sent the outcomes")


def test_outcomes_left_behind_by_a_start_go_from_the_heartbeat_thread_once_due() -> None:
    """Regression: with its only thread in a long task, a worker sent the outcome of the task
    before it only once the long one ended, so a kill in between ran that task again.

    The task before it ran long enough to be marked, so the heartbeat thread
    idles: the start of the long task wakes it, and it sends the outcome
    `ACK_DELAY` after it came back, in one call, the long task running on.
    """
    given = settings(threads=1, prefetch=1)
    short, long = tasks(2)
    schedule = Schedule(
        ready=(long,),
        running=(Running(100.0, short, marked=True),),
        calls=Calls(upkeep_at=float("inf")),  # nothing to mark: it waits for its next beat
    )
    schedule, _ = scheduler.finished(schedule, given, Outcome(short, None), now=100.3)
    run, schedule = scheduler.next_step(schedule, given, now=100.3, stopping=False, held=2)
    assert run == Run(long, wake_upkeep=True), "the outcome would wait for the long task"
    sent_at, look, schedule = looks_until_sent(schedule, 100.3, given)
    assert sent_at == pytest.approx(100.3 + ACK_DELAY)
    assert look == Acknowledge((Outcome(short, None),))
    assert (schedule.unsent, schedule.calls.acknowledging) == ((), True)
    assert schedule.running == (Running(100.3, long),)
    # The long task still gets its mark, after the acknowledgement.
    sent, _ = scheduler.acknowledged(schedule, look.outcomes, reached=True, broken=False, now=101)
    look, _ = next_upkeep(sent, given, now=100.3 + MARK_DELAY, stopping=False)
    assert look == Mark((long,))


def test_outcomes_left_behind_go_within_the_delay_without_a_wake_while_it_looks_anyway() -> None:
    """A quick task before the long one: the heartbeat thread, looking every ACK_DELAY while a
    task runs unmarked, needs no wake, and sends the outcome within the delay all the same."""
    given = settings(threads=1, prefetch=1)
    short, long = tasks(2)
    schedule = Schedule(ready=(short, long), calls=Calls(upkeep_at=float("inf")))
    run, schedule = scheduler.next_step(schedule, given, now=100.0, stopping=False, held=2)
    assert run == Run(short, wake_upkeep=True)  # it idled: this task needs a mark
    look, schedule = next_upkeep(schedule, given, now=100.0, stopping=False)
    assert look == Wait(pytest.approx(ACK_DELAY))
    schedule, _ = scheduler.finished(schedule, given, Outcome(short, None), now=100.002)
    run, schedule = scheduler.next_step(schedule, given, now=100.002, stopping=False, held=2)
    assert run == Run(long, wake_upkeep=False)
    sent_at, look, _ = looks_until_sent(schedule, schedule.calls.upkeep_at, given)
    assert look == Acknowledge((Outcome(short, None),))
    assert sent_at <= 100.002 + ACK_DELAY + 1e-9


def test_a_drain_of_short_tasks_wakes_the_heartbeat_thread_once_per_batch() -> None:
    """One thread, prefetch 64, tasks of 50 us: the thread sends each claim's outcomes itself,
    in one call as the prefetch runs out; the heartbeat thread is woken once per batch, not
    per task, and sends nothing."""
    given = settings(threads=1, prefetch=64)
    schedule, now, wakes, sends = Schedule(calls=Calls(upkeep_at=float("inf"))), 100.0, 0, []
    for _ in range(3):  # three claims' worth
        schedule, _ = scheduler.claimed(
            schedule._replace(calls=schedule.calls._replace(claiming=True)),
            given, tasks(65), reached=True, now=now,
        )  # fmt: skip
        while schedule.ready or schedule.unsent:
            held = len(schedule.ready) + len(schedule.unsent) + 1
            step, schedule = scheduler.next_step(schedule, given, now=now, stopping=False,
                                                 held=held)  # fmt: skip
            if isinstance(step, Acknowledge):
                sends.append(len(step.outcomes))
                schedule, _ = scheduler.acknowledged(schedule, step.outcomes, reached=True,
                                                     broken=False, now=now)  # fmt: skip
                continue
            assert isinstance(step, Run), step
            if step.wake_upkeep:
                wakes += 1
                look, schedule = next_upkeep(schedule, given, now=now, stopping=False)
                assert isinstance(look, Wait), look
            now += 0.00005
            schedule, _ = scheduler.finished(schedule, given, Outcome(step.task, None), now=now)
    assert sends == [65, 65, 65]
    assert wakes <= 3 * 2, wakes


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
    stop, after = forced_stop(schedule)
    assert stop == ForcedStop(give_back=waiting + ready, outcomes=unsent, running=running)
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
        assert 0.0 < step.seconds == pytest.approx(min(MARK_DELAY - age, ACK_DELAY))
        assert step.seconds <= POLL
