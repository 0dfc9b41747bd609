"""The scheduler's room under an adaptive prefetch, as pure functions: no threads, no backend.

A worker with an adaptive prefetch swaps in `Settings.resized` each time
its window (`threadmill_core.worker.prefetch_window`) changes, and after
each run hands what `prefetch_window.excess` says to `scheduler.give_back`;
these tests drive the scheduler the same way and check that each claim
asks for the window's room, that what waits beyond a room shrunk to half
of it or less by long runs in a row goes back newest first (a `Release`),
that one long run gives nothing back, and that a fixed room never does.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.worker.test_scheduler import POLL, ask, held_task, tasks
from threadmill_core.worker import prefetch_window, scheduler
from threadmill_core.worker.held import HeldTask, Outcome
from threadmill_core.worker.prefetch_window import (
    Window,
    capacity,
    excess,
    observe_claim,
    observe_run,
)
from threadmill_core.worker.scheduler import Calls, Claim, Release, Run, Running, Schedule, Settings

SHORT = 0.0001  # a 0.1 ms task
LONG = 0.1  # a 100 ms task
ROUND_TRIP = 0.0003  # a 0.3 ms claim


def sized(window: Window, threads: int) -> Settings:
    """The settings a worker with `threads` and this window runs with."""
    made = Settings.for_worker(threads=threads, prefetch=0, poll=POLL, burst=False, max_tasks=None)
    return made.resized(threads=threads, prefetch=window.size)


@pytest.mark.parametrize(("threads", "prefetch"), [(1, 0), (1, 7), (1, 64), (4, 3), (8, 100)])
def test_resized_settings_are_those_of_a_worker_made_with_that_prefetch(
    threads: int, prefetch: int
) -> None:
    """Capacity, refill mark and acknowledgement batch follow as `for_worker` sets them."""
    made = Settings.for_worker(threads=threads, prefetch=5, poll=POLL, burst=True, max_tasks=9)
    expected = Settings.for_worker(
        threads=threads, prefetch=prefetch, poll=POLL, burst=True, max_tasks=9
    )
    assert made.resized(threads=threads, prefetch=prefetch) == expected


def test_one_thread_of_short_tasks_claims_ever_larger_batches_up_to_the_ceiling() -> None:
    """One thread, 0.1 ms tasks, a queue that always has more: each claim asks for the
    window's whole room; the prefetch doubles claim by claim up to its target."""
    window = Window.start(1)
    schedule = Schedule()
    asked = []
    for _ in range(10):
        settings = sized(window, threads=1)
        step, schedule = ask(schedule, settings, held=0)
        assert step == Claim(capacity(window))
        asked.append(step.limit)
        window = observe_claim(window, asked=step.limit, got=step.limit, round_trip=ROUND_TRIP)
        batch = tasks(step.limit)
        schedule, _ = scheduler.claimed(schedule, settings, batch, reached=True, now=100.0)
        for _ in batch:  # run the batch; outcomes go with the next claim
            step, schedule = ask(schedule, sized(window, threads=1), held=len(schedule.ready))
            assert isinstance(step, Run)
            window = observe_run(window, SHORT)
            schedule = schedule._replace(running=())
        schedule = schedule._replace(unsent=())
    assert asked == [2, 2, 3, 5, 9, 17, 33, 61, 61, 61]  # the target: 20 x 0.3 / 0.1 = 60


def test_a_claim_asks_for_the_room_the_window_leaves_beside_what_is_held() -> None:
    """Four threads, a grown window and tasks held: the claim is the room minus what is held."""
    window = Window(threads=4, size=20, run_ewma=SHORT, claim_ewma=ROUND_TRIP)
    settings = sized(window, threads=4)
    assert (settings.capacity, settings.refill_at) == (24, 10)
    step, _ = ask(Schedule(ready=tasks(2)), settings, held=6)  # 4 running, 2 waiting
    assert step == Claim(18)


def finished_run(window: Window, schedule: Schedule, seconds: float) -> tuple[Window, Schedule]:
    """A run of `seconds` ended, as `TaskThreads._run_task` takes it: observed, the room
    resized, then what `excess` says given back (the finished task is no longer running)."""
    window = observe_run(window, seconds)
    back = excess(window, waiting=len(schedule.ready), running=len(schedule.running))
    return window, scheduler.give_back(schedule, back)


def test_one_long_task_among_short_ones_keeps_what_is_held_and_claims_less() -> None:
    """One thread holds 63 after short tasks; a 100 ms run shrinks the window to none
    beyond the thread. One slow run may be a stall: what is held stays and runs, and the
    next claim asks for one task."""
    window = Window(threads=1, size=64, run_ewma=SHORT, claim_ewma=ROUND_TRIP, recent=(SHORT,))
    ready = tasks(63)
    window, schedule = finished_run(window, Schedule(ready=ready), LONG)
    assert window.size == 0
    settings = sized(window, threads=1)
    step, after = ask(schedule, settings, held=63)
    assert step == Run(ready[0])
    assert after.calls.give_back == ()
    step, _ = ask(Schedule(), settings, held=0)
    assert step == Claim(1)


def test_long_tasks_in_a_row_after_short_ones_give_back_the_newest() -> None:
    """A second 100 ms run in a row: the thread keeps the oldest task waiting, to run next,
    and the next step gives back the other 61 in one call; they no longer count as claimed."""
    window = Window(threads=1, size=64, run_ewma=SHORT, claim_ewma=ROUND_TRIP, recent=(SHORT,))
    ready = tasks(63)
    claimed = Schedule(ready=ready, calls=Calls(claimed=200))
    window, schedule = finished_run(window, claimed, LONG)
    window, schedule = finished_run(window, schedule._replace(ready=ready[1:]), LONG)
    assert schedule.ready == ready[1:2]
    assert schedule.calls.claimed == 200 - 61
    settings = sized(window, threads=1)
    step, after = ask(schedule, settings, held=62)
    assert step == Release(ready[2:])
    step, after = ask(after, settings, held=62)
    assert step == Run(ready[1])


def test_four_threads_give_back_beyond_the_room_left_beside_what_runs() -> None:
    """Four threads, three still running: the room is the four threads and no prefetch, so
    the finished thread's next task is kept and the rest of what waits goes back."""
    window = Window(threads=4, size=64, run_ewma=SHORT, claim_ewma=ROUND_TRIP)
    running = tuple(Running(since=99.0, task=held_task()) for _ in range(3))
    ready = tasks(40)
    schedule = Schedule(ready=ready, running=running)
    for _ in range(5):
        window, schedule = finished_run(window, schedule, LONG)
    assert schedule.ready == ready[:1]
    assert schedule.calls.give_back == ready[1:]


def test_giving_back_nothing_or_more_than_waits() -> None:
    """`give_back` of 0 changes nothing; of more than waits, gives back what waits."""
    ready = tasks(3)
    schedule = Schedule(ready=ready, calls=Calls(claimed=3))
    assert scheduler.give_back(schedule, 0) is schedule
    emptied = scheduler.give_back(schedule, 5)
    assert (emptied.ready, emptied.calls.give_back, emptied.calls.claimed) == ((), ready, 0)


@given(
    threads=st.integers(min_value=1, max_value=8),
    prefetch=st.integers(min_value=0, max_value=70),
    running=st.integers(min_value=0, max_value=8),
    ready=st.integers(min_value=0, max_value=80),
    unsent=st.integers(min_value=0, max_value=10),
)
def test_a_fixed_room_never_gives_back_while_running(
    threads: int, prefetch: int, running: int, ready: int, unsent: int
) -> None:
    """Whatever a fixed room holds (never more than it has room for), no step gives back."""
    settings = Settings.for_worker(
        threads=threads, prefetch=prefetch, poll=POLL, burst=False, max_tasks=None
    )
    running = min(running, threads)
    ready = min(ready, settings.capacity - running)
    schedule = Schedule(
        ready=tasks(ready),
        running=tuple(Running(since=99.0, task=held_task()) for _ in range(running)),
        unsent=tuple(Outcome(held, None) for held in tasks(unsent)),
        unsent_since=99.995,
    )
    held = ready + running + unsent
    step, after = ask(schedule, settings, held=held)
    assert not isinstance(step, Release)
    assert after.calls.give_back == ()


def test_a_stopping_worker_still_gives_back_everything() -> None:
    """Stopping takes precedence: the whole prefetch goes, whatever the room."""
    ready: tuple[HeldTask, ...] = tasks(10)
    settings = sized(Window(threads=1, size=0), threads=1)
    step, _ = ask(Schedule(ready=ready), settings, stopping=True)
    assert step == Release(ready)


def test_the_ceiling_bounds_the_room() -> None:
    """However short the tasks, the room is at most threads + CEILING."""
    window = Window(threads=2, size=prefetch_window.CEILING, run_ewma=0.0, claim_ewma=1.0)
    assert sized(window, threads=2).capacity == 2 + prefetch_window.CEILING
