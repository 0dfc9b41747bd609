"""The adaptive prefetch rule, as pure functions: no threads, no backend, no clock.

The table tests pin one rule each; a Hypothesis property holds the bounds
over any sequence of observations. A deterministic discrete-event
simulation then runs workers that claim as the scheduler does
(`Settings.for_worker`'s refill rule) with the window sizing their
prefetch and giving back what `excess` says, on virtual time: one thread
of 0.1 ms tasks against a 0.3 ms claim grows a large window and drains
near a fixed prefetch of 64; 40 tasks of 100 ms on two one-thread workers
finish within 1.15x of the ideal makespan, where a fixed prefetch of 64
hoards them; and 40 such tasks after 2,000 short ones, which grown
windows claim in bulk, are given back and shared.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from threadmill_core.worker.prefetch_window import (
    CEILING,
    Window,
    capacity,
    excess,
    observe_claim,
    observe_run,
    target,
)

SHORT = 0.0001  # a 0.1 ms task
LONG = 0.1  # a 100 ms task
ROUND_TRIP = 0.0003  # a 0.3 ms claim


def warmed(window: Window, *, run: float, round_trip: float = ROUND_TRIP) -> Window:
    """`window` after one run of `run` seconds and one full claim of one task."""
    window = observe_run(window, run)
    return observe_claim(window, asked=1, got=1, round_trip=round_trip)


def full_claims(window: Window, count: int, *, round_trip: float = ROUND_TRIP) -> Window:
    for _ in range(count):
        window = observe_claim(
            window, asked=capacity(window), got=capacity(window), round_trip=round_trip
        )
    return window


# --- the rule, one case each ----------------------------------------------------------


def test_a_fresh_window_prefetches_as_many_as_its_threads() -> None:
    """Before anything is observed, the prefetch is the thread count (today's default)."""
    window = Window.start(4)
    assert (window.size, capacity(window), target(window)) == (4, 8, 4)
    assert Window.start(100).size == CEILING
    assert Window.start(1, floor=3).size == 3


def test_short_tasks_and_full_claims_grow_the_window_by_doubling() -> None:
    """Each full claim doubles the window while tasks are short against a claim."""
    window = warmed(Window.start(1), run=SHORT)
    sizes = []
    for _ in range(7):
        window = full_claims(window, 1)
        sizes.append(window.size)
    assert sizes == [4, 8, 16, 32, 60, 60, 60]
    assert target(window) == 60  # HORIZON (20) claims of 3 tasks each


def test_the_window_grows_from_zero() -> None:
    """A window shrunk to 0 grows again, to 1 first, once tasks turn short."""
    window = warmed(Window.start(1), run=LONG)
    assert window.size == 0
    for _ in range(40):
        window = observe_run(window, SHORT)
    assert full_claims(window, 1).size == 1
    assert full_claims(window, 2).size == 2


def test_long_tasks_shrink_the_window_to_its_floor_at_once() -> None:
    """One long run among short ones brings the window down without waiting for a claim."""
    window = full_claims(warmed(Window.start(1), run=SHORT), 8)
    assert window.size == 60
    shrunk = observe_run(window, LONG)
    assert shrunk.size == 0
    assert capacity(shrunk) == 1
    assert observe_run(attrs.evolve(window, floor=2), LONG).size == 2


def test_a_full_claim_never_grows_past_the_target() -> None:
    """Claims that come back full do not grow a window of long tasks."""
    window = full_claims(warmed(Window.start(2), run=LONG), 10)
    assert window.size == 0


def test_an_empty_or_short_claim_resets_the_window() -> None:
    """A claim that brings fewer than it asked (the queue ran out) resets to the start size."""
    grown = full_claims(warmed(Window.start(2), run=SHORT), 8)
    assert grown.size == 64
    for got in (0, 10):
        reset = observe_claim(grown, asked=66, got=got, round_trip=ROUND_TRIP)
        assert reset.size == 2
        assert reset.run_ewma == grown.run_ewma  # the tasks' kind is remembered


def test_a_reset_never_raises_a_window_of_long_tasks() -> None:
    """After long tasks, an empty queue leaves the window at the (lower) target."""
    window = warmed(Window.start(4), run=LONG)
    assert observe_claim(window, asked=4, got=0, round_trip=ROUND_TRIP).size == 0


def test_instant_tasks_give_the_ceiling() -> None:
    """Tasks that ran in no measurable time grow the window to its ceiling, not a division error."""
    window = full_claims(warmed(Window.start(1, ceiling=16), run=0.0), 5)
    assert (target(window), window.size) == (16, 16)


def test_the_target_scales_with_the_threads() -> None:
    """More threads run more tasks during a claim, so they hold more ahead."""
    one = warmed(Window.start(1), run=0.001)
    four = warmed(Window.start(4), run=0.001)
    assert (target(one), target(four)) == (6, 24)


# --- giving back what a shrunk room no longer holds -----------------------------------


def grown(threads: int) -> Window:
    """A window grown to its target of 60-odd on short tasks."""
    return full_claims(warmed(Window.start(threads), run=SHORT), 8)


def test_long_runs_in_a_row_give_back_all_beyond_the_shrunk_room() -> None:
    """One thread holding 60 short-task claims: after two 100 ms runs in a row the room is
    the thread alone, so all 60 waiting go back but the one the free thread runs next."""
    window = observe_run(grown(1), SHORT)
    first = observe_run(window, LONG)
    assert first.size == 0
    assert excess(first, waiting=60, running=0) == 0  # one slow run may be a stall
    second = observe_run(first, LONG)
    assert excess(second, waiting=59, running=0) == 58


def test_one_stall_among_short_tasks_gives_nothing_back() -> None:
    """A 5 ms run among 0.1 ms ones shrinks the window below half of what waits, but the
    runs around it are short: nothing goes back, before or after the next short run."""
    window = observe_run(grown(1), SHORT)
    stalled = observe_run(window, 0.005)
    assert 2 * capacity(stalled) <= 40  # the window alone would give back
    assert excess(stalled, waiting=40, running=0) == 0
    assert excess(observe_run(stalled, SHORT), waiting=39, running=0) == 0


def test_a_pause_that_slows_every_running_task_gives_nothing_back() -> None:
    """Four threads, a pause that slows the four tasks running: four slow runs in a row, one
    short before them among the last five: nothing goes back. A fifth slow run does it."""
    window = observe_run(grown(4), SHORT)
    for _ in range(4):
        window = observe_run(window, LONG)
    assert excess(window, waiting=60, running=3) == 0
    window = observe_run(window, LONG)
    assert excess(window, waiting=60, running=3) == 60 - (capacity(window) - 3)


def test_a_room_that_keeps_more_than_half_of_what_waits_gives_nothing_back() -> None:
    """Long runs that shrink the room to more than half of what waits give nothing back:
    what is held runs soon enough here."""
    window = observe_claim(Window.start(2), asked=1, got=1, round_trip=ROUND_TRIP)
    for _ in range(3):
        window = observe_run(window, LONG)
    assert capacity(window) == 2
    assert excess(window, waiting=3, running=0) == 0
    assert excess(window, waiting=4, running=0) == 2
    assert excess(window, waiting=2, running=2) == 2


def test_the_room_kept_follows_the_shortest_recent_run() -> None:
    """Runs of 1 ms after a 100 ms one: the window's average says none beyond the thread, the
    shortest of the last two runs says 6; so 7 of 20 waiting are kept, and 13 all."""
    window = observe_run(grown(1), LONG)
    for _ in range(2):
        window = observe_run(window, 0.001)
    assert window.size == 0
    assert target(attrs.evolve(window, run_ewma=0.001)) == 6
    assert excess(window, waiting=20, running=0) == 20 - 7
    assert excess(window, waiting=13, running=0) == 0


def test_nothing_goes_back_before_threads_plus_one_runs_are_seen() -> None:
    """A fresh window's room is the threads and as many again; an idle peer's claims fill it."""
    window = observe_claim(Window.start(2), asked=4, got=4, round_trip=ROUND_TRIP)
    window = observe_run(observe_run(window, LONG), LONG)
    assert excess(window, waiting=20, running=0) == 0
    assert excess(observe_run(window, LONG), waiting=20, running=0) == 18


@given(
    threads=st.integers(1, 8),
    runs=st.lists(st.floats(min_value=0, max_value=1.0), max_size=20),
    waiting=st.integers(0, 100),
    running=st.integers(0, 8),
)
def test_what_goes_back_is_what_waits_beyond_a_room_of_half_of_it_or_less(
    threads: int, runs: list[float], waiting: int, running: int
) -> None:
    """Whatever was observed: 0, or all but a room that is at most half of what waits and
    at least the window's."""
    window = full_claims(warmed(Window.start(threads), run=SHORT), 3)
    for run in runs:
        window = observe_run(window, run)
    running = min(running, threads)
    back = excess(window, waiting=waiting, running=running)
    assert 0 <= back <= waiting
    if back:
        kept = waiting - back
        assert 2 * kept <= waiting
        assert kept >= capacity(window) - running
    assert len(window.recent) == min(len(runs) + 1, threads + 1)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda w: observe_run(w, -1.0), ValueError, "seconds must be finite seconds >= 0"),
        (lambda w: observe_run(w, float("nan")), ValueError, "finite seconds >= 0, got nan"),
        (lambda w: observe_run(w, float("inf")), ValueError, "finite seconds >= 0, got inf"),
        (
            lambda w: observe_run(w, "1"),  # type: ignore[arg-type]
            TypeError,
            "seconds must be a number",
        ),
        (
            lambda w: observe_claim(w, asked=0, got=0, round_trip=0.1),
            ValueError,
            "asked must be >= 1",
        ),
        (
            lambda w: observe_claim(w, asked=2, got=3, round_trip=0.1),
            ValueError,
            r"got must be within 0..asked \(2\), got 3",
        ),
        (
            lambda w: observe_claim(w, asked=2, got=-1, round_trip=0.1),
            ValueError,
            "got must be within",
        ),
        (
            lambda w: observe_claim(w, asked=2.0, got=1, round_trip=0.1),  # type: ignore[arg-type]
            TypeError,
            "asked must be an integer",
        ),
        (
            lambda w: observe_claim(w, asked=2, got=1, round_trip=-0.1),
            ValueError,
            "round_trip must be finite seconds >= 0",
        ),
        (lambda w: Window.start(0), ValueError, "threads must be an integer >= 1, got 0"),
        (lambda w: Window.start(True), ValueError, "threads must be an integer >= 1"),
        (lambda w: Window.start(2, floor=-1), ValueError, "floor must be an integer >= 0"),
        (lambda w: Window.start(2, floor=5, ceiling=4), ValueError, "floor must not exceed"),
        (lambda w: attrs.evolve(w, size=65), ValueError, r"size must be within floor..ceiling"),
        (lambda w: attrs.evolve(w, run_ewma=-1.0), ValueError, "run_ewma must be finite"),
        (lambda w: excess(w, waiting=-1, running=0), ValueError, "waiting must be an integer"),
        (lambda w: excess(w, waiting=1, running=True), ValueError, "running must be an integer"),
    ],
)
def test_bad_input_is_refused_with_a_clear_error(
    call: Callable[[Window], object], error: type[Exception], message: str
) -> None:
    """Durations, counts and bounds that make no sense raise, naming the value."""
    with pytest.raises(error, match=message):
        call(Window.start(2))


# --- the bounds, over any observations -----------------------------------------------

seconds = st.floats(min_value=0, max_value=1e4, allow_nan=False)
observation = st.one_of(
    st.tuples(st.just("run"), seconds),
    st.tuples(
        st.just("claim"),
        st.tuples(st.integers(1, 200), st.integers(0, 200), seconds),
    ),
)


@given(
    threads=st.integers(1, 64),
    bounds=st.tuples(st.integers(0, 100), st.integers(0, 100)).map(sorted),
    observations=st.lists(observation, max_size=60),
)
def test_the_window_stays_within_its_bounds_and_target(
    threads: int, bounds: list[int], observations: list[tuple[str, object]]
) -> None:
    """Whatever is observed, floor <= size <= min(target, ceiling); a full claim never shrinks
    a window below its target, and a short one never leaves it above the start size."""
    floor, ceiling = bounds
    window = Window.start(threads, floor=floor, ceiling=ceiling)
    for kind, value in observations:
        before = window
        if kind == "run":
            assert isinstance(value, float)
            window = observe_run(window, value)
        else:
            assert isinstance(value, tuple)
            asked, got, round_trip = value
            got = min(got, asked)
            window = observe_claim(window, asked=asked, got=got, round_trip=round_trip)
            if got == asked:
                assert window.size >= min(before.size, target(window))
            else:
                assert window.size <= max(min(threads, ceiling), floor)
        assert floor <= window.size <= min(target(window), ceiling)
        assert capacity(window) == threads + window.size


# --- a simulation on virtual time ----------------------------------------------------


@attrs.define
class SimWorker:
    """One worker process: its threads claim and run as the scheduler has them."""

    threads: int
    window: Window
    fixed: int | None  # a fixed --prefetch bypasses the window
    free: int = 0
    ready: int = 0
    running: int = 0
    claiming: bool = False
    done: bool = False
    #: A lingering worker's claim found nothing: it claims again at this time.
    idle_until: float = 0.0

    @property
    def prefetch(self) -> int:
        return self.window.size if self.fixed is None else self.fixed


@attrs.define
class Outcome:
    makespan: float
    largest_prefetch: int
    ran: list[int]
    windows: list[Window]
    #: Seconds of tasks each worker ran.
    busy: list[float]


def simulate(
    durations: list[float],
    *,
    workers: int,
    threads: int,
    round_trip: float,
    fixed: int | None = None,
    offsets: tuple[float, ...] = (),
    linger: float | None = None,
    give_back: bool = True,
) -> Outcome:
    """Run `durations` (a FIFO queue, all enqueued at 0) on `workers` processes.

    A claim occupies a thread for `round_trip` and takes its tasks at its
    midpoint (when the server runs it); a worker claims when it has room
    of at least the scheduler's `refill_at`, or room and nothing ready. A
    claim that finds nothing ends the worker (a burst), or with `linger`,
    makes it claim again that many seconds later until every task has run
    (a worker that keeps running). Deterministic: ties fall to the order
    events were scheduled. Acknowledgements are not modelled: they cost the
    same per task whatever the window.

    With an adaptive window and `give_back`, after each run the worker gives
    back what `excess` says, newest first, to READY's tail, at once; the
    call occupies the thread that ran the task for a round trip.
    """
    queue = list(reversed(durations))
    sims = [SimWorker(threads, Window.start(threads), fixed) for _ in range(workers)]
    events: list[tuple[float, int, int, str, float]] = []
    order = itertools.count()
    ran = [0] * workers
    busy = [0.0] * workers
    taken = [0] * workers
    largest, finished = 0, 0.0

    def push(time: float, index: int, kind: str, value: float = 0.0) -> None:
        heapq.heappush(events, (time, next(order), index, kind, value))

    def act(now: float, index: int) -> None:
        nonlocal largest
        worker = sims[index]
        while worker.free and not worker.done:
            prefetch = worker.prefetch
            refill_at = 1 + prefetch if threads == 1 else max(1, (prefetch + 1) // 2)
            room = threads + prefetch - worker.ready - worker.running
            if (
                not worker.claiming
                and room > 0
                and (room >= refill_at or not worker.ready)
                and now >= worker.idle_until
            ):
                largest = max(largest, prefetch)
                worker.claiming, worker.free = True, worker.free - 1
                push(now + round_trip / 2, index, "take", room)
            elif worker.ready:
                worker.ready, worker.running, worker.free = (
                    worker.ready - 1,
                    worker.running + 1,
                    worker.free - 1,
                )
                duration = queue_of[index].pop(0)
                push(now + duration, index, "ran", duration)
            else:
                break

    queue_of: list[list[float]] = [[] for _ in range(workers)]
    for index in range(workers):
        push(offsets[index] if index < len(offsets) else 0.0, index, "start")
    while events:
        now, _, index, kind, value = heapq.heappop(events)
        worker = sims[index]
        if kind == "start":
            worker.free = threads
        elif kind == "wake":  # a lingering worker claims again
            if sum(ran) == len(durations):
                continue
        elif kind == "released":  # the give-back call is over
            worker.free += 1
        elif kind == "take":  # the server runs the claim
            asked = int(value)
            took = [queue.pop() for _ in range(min(asked, len(queue)))]
            queue_of[index].extend(took)
            taken[index] = len(took)
            push(now + round_trip / 2, index, "claimed", asked)
            continue
        elif kind == "claimed":
            got = taken[index]
            worker.window = observe_claim(
                worker.window, asked=int(value), got=got, round_trip=round_trip
            )
            worker.ready += got
            worker.claiming, worker.free = False, worker.free + 1
            if got == 0 and linger is not None:
                worker.idle_until = now + linger
                push(worker.idle_until, index, "wake")
            else:
                worker.done = got == 0 and not worker.ready and not worker.running
        elif kind == "ran":
            worker.window = observe_run(worker.window, value)
            worker.running, worker.free = worker.running - 1, worker.free + 1
            ran[index] += 1
            busy[index] += value
            finished = now
            back = excess(worker.window, waiting=worker.ready, running=worker.running)
            if back and give_back and worker.fixed is None:
                held = queue_of[index]
                queue[0:0] = reversed(held[-back:])  # READY's tail, in the order given
                del held[-back:]
                worker.ready -= back
                worker.free -= 1
                push(now + round_trip, index, "released")
        act(now, index)
    assert sum(ran) == len(durations)
    return Outcome(finished, largest, ran, [worker.window for worker in sims], busy)


def test_simulation_short_tasks_on_one_thread_grow_a_large_window() -> None:
    """0.1 ms tasks against a 0.3 ms claim: the window reaches 60, and the drain is within 1%
    of a fixed prefetch of 64 and about twice today's default (prefetch = threads)."""
    tasks = [SHORT] * 20_000
    adaptive = simulate(tasks, workers=1, threads=1, round_trip=ROUND_TRIP)
    tuned = simulate(tasks, workers=1, threads=1, round_trip=ROUND_TRIP, fixed=64)
    default = simulate(tasks, workers=1, threads=1, round_trip=ROUND_TRIP, fixed=1)
    assert adaptive.largest_prefetch == 60
    assert adaptive.makespan <= tuned.makespan * 1.01
    assert default.makespan >= adaptive.makespan * 1.8


@pytest.mark.parametrize("round_trip", [0.0003, 0.001, 0.005])
@pytest.mark.parametrize("offsets", [(), (0.0, 0.05), (0.0, 0.25)])
def test_simulation_long_tasks_are_not_hoarded(
    round_trip: float, offsets: tuple[float, ...]
) -> None:
    """40 tasks of 100 ms on two one-thread workers finish within 1.15x of the ideal
    makespan (the work and the late start shared evenly), however the workers start."""
    tasks = [LONG] * 40
    ideal = (sum(tasks) + sum(offsets)) / 2
    adaptive = simulate(tasks, workers=2, threads=1, round_trip=round_trip, offsets=offsets)
    assert adaptive.makespan <= 1.15 * ideal
    assert abs(adaptive.ran[0] - adaptive.ran[1]) <= 4


def test_simulation_a_fixed_large_prefetch_hoards_long_tasks() -> None:
    """The same run with a fixed prefetch of 64: the first worker takes all 40 (twice the
    ideal makespan), which is what the window prevents."""
    hoarded = simulate([LONG] * 40, workers=2, threads=1, round_trip=ROUND_TRIP, fixed=64)
    assert hoarded.ran == [40, 0]
    assert hoarded.makespan >= 1.9 * 20 * LONG


def test_simulation_long_tasks_after_short_ones_are_given_back_and_shared() -> None:
    """2,000 short tasks then 40 of 100 ms on two one-thread workers that keep running: each
    window grows to 60 and claims long tasks in bulk, then gives back what its shrunk room
    no longer holds, and the drain ends within 1.05x of the ideal makespan. Without the
    give-back, one worker runs its hoard alone: 1.5x the ideal or more."""
    tasks = [SHORT] * 2_000 + [LONG] * 40
    ideal = sum(tasks) / 2
    shared = simulate(tasks, workers=2, threads=1, round_trip=ROUND_TRIP, linger=0.05)
    hoarded = simulate(
        tasks, workers=2, threads=1, round_trip=ROUND_TRIP, linger=0.05, give_back=False
    )
    assert shared.largest_prefetch == hoarded.largest_prefetch == 60
    assert shared.makespan <= 1.05 * ideal
    assert hoarded.makespan >= 1.5 * ideal


@pytest.mark.parametrize("threads", [1, 4])
@pytest.mark.parametrize("round_trip", [0.0003, 0.001, 0.005])
def test_simulation_what_is_given_back_is_shared_evenly(threads: int, round_trip: float) -> None:
    """The same drain, one or four threads a worker, claims of 0.3 to 5 ms: each worker runs
    within 10% of half the work, and the drain never ends more than 5% later than without
    a give-back (its call costs a round trip where nothing was hoarded)."""
    tasks = [SHORT] * 2_000 + [LONG] * 40
    shared = simulate(tasks, workers=2, threads=threads, round_trip=round_trip, linger=0.05)
    hoarded = simulate(
        tasks, workers=2, threads=threads, round_trip=round_trip, linger=0.05, give_back=False
    )
    assert max(shared.busy) <= 0.55 * sum(shared.busy)
    assert shared.makespan <= 1.05 * hoarded.makespan


def test_simulation_many_threads_of_mixed_tasks_stay_within_bounds() -> None:
    """Eight threads over short tasks then long ones: the window grows, then falls to 0."""
    tasks = [SHORT] * 5_000 + [LONG] * 40
    outcome = simulate(tasks, workers=2, threads=8, round_trip=ROUND_TRIP)
    assert outcome.largest_prefetch == CEILING
    assert [window.size for window in outcome.windows] == [0, 0]
