"""How many tasks a worker claims ahead of its threads: a pure rule over what it observes.

A worker's prefetch is the tasks it holds beyond its threads, so that a
thread that finishes starts the next task without waiting for a claim. It
pays when tasks are short against a claim's round trip, and costs when they
are long: every task held is one an idle worker elsewhere cannot take.
`Window` sizes it from two running averages the worker feeds it:

- `observe_run`: how long each task ran (seconds);
- `observe_claim`: how long each claim took to come back, how many tasks
  it asked for and how many it got.

The rule, with ``c`` the average claim round trip and ``r`` the average run
time:

- **Target**: ``threads * c / r * HORIZON``, rounded down, within
  ``[floor, ceiling]``. ``threads * c / r`` is how many tasks the threads run
  during one claim round trip; the prefetch holds `HORIZON` (20) of those.
  So the work held beyond the threads takes at most about `HORIZON` claim
  round trips to run, which bounds what an idle worker elsewhere can wait
  for because of it (6 ms at a 0.3 ms round trip), while a claim's round
  trip is spread over enough tasks that it costs at most about
  ``1 / HORIZON`` (5%) of the run time, even with one thread (which runs
  nothing while it claims), unless the ceiling caps the window.
- **Grow** only on a claim that came back full (the queue has more): the
  size doubles (from 0: to 1), never past the target. A fresh worker thus
  reaches a large window within a few claims, and never on a guess.
- **Shrink** at once to the target whenever an observation lowers it. Long
  tasks (``r`` much longer than ``HORIZON * c``) bring it to `floor`, 0 by
  default: the worker holds only what its threads run, plus none. At 100 ms
  tasks and a 1 ms round trip, prefetching would save at most 1% of the run
  time, while each task held may finish a whole run time later than on an
  idle peer (on two one-thread workers and 40 tasks, one held task is +5%
  of the makespan).
- **Reset** on a claim that came back short (fewer tasks than asked: the
  queue is empty): the size goes back to where a fresh worker starts (its
  thread count, today's fixed default), or lower if the target is lower.
  The next burst of work may be of another kind, and a window grown on short
  tasks must not grab a burst of long ones before it has seen one run.
- **Give back** (`excess`) what is held beyond a room that shrank to half
  of it or less: the newest prefetched tasks, not started, go back to
  READY uncharged (the worker releases them at once), for idle workers
  elsewhere. A claim that came back full before the first long run may
  have taken up to ``1 + CEILING`` tasks of what came next; held, they
  would all run here, one after another, while a peer idles. The room
  kept is the larger of the window's and the one the shortest of the
  last ``threads + 1`` runs alone would give, so it takes that many slow
  runs in a row: one stall among short tasks (a few ms on a loaded
  machine), or one pause that slows every running task at once, shrinks
  the window but gives nothing back. A give-back costs a call and sends
  tasks to READY's tail, and giving back on every dip of the averages,
  then claiming the same tasks again, slowed drains of short tasks. After
  a give-back the worker holds no more than its room and claims only to
  fill it, so another give-back takes the room halving again.

Run times weigh more the longer they are (an average of seconds, not of
rates): one long task among short ones shrinks the window at once, and it
grows back only as short ones keep coming. Until both a run and a claim
have been seen, the target is the starting size.

A claim's round trip as measured includes the per-task part of the claim
(it grows a little with the batch); that biases the target upwards only
where tasks are so short that the window sits at its ceiling anyway.

`capacity` is what the scheduler's claims fill: threads plus the prefetch.
The worker applies the rule's answers and nothing else; a fixed
``--prefetch N`` bypasses it (and never gives back while it runs).
"""

from __future__ import annotations

import math
from typing import Any

import attrs

#: The prefetch holds about this many claim round trips of the threads' work.
HORIZON = 20
#: The largest prefetch, unless the worker sets another.
CEILING = 64
#: Weight of the newest observation in the running averages.
RUN_WEIGHT = 0.2
CLAIM_WEIGHT = 0.3


def _at_least(low: int) -> Any:
    def check(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{attribute.name} must be an integer >= {low}, got {value!r}")

    return check


def _seconds(name: str, value: float) -> float:
    """`value` if it is a duration: a finite number of seconds, not negative."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be finite seconds >= 0, got {value!r}")
    return float(value)


def _optional_seconds(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None:
        _seconds(attribute.name, value)


@attrs.frozen(kw_only=True)
class Window:
    """A worker's adaptive prefetch; `size` is the prefetch (tasks beyond `threads`).

    Made with `Window.start`; each observation returns a new one.
    """

    #: The worker's task threads.
    threads: int = attrs.field(validator=_at_least(1))
    #: Bounds of `size`.
    floor: int = attrs.field(default=0, validator=_at_least(0))
    ceiling: int = attrs.field(default=CEILING, validator=_at_least(0))
    #: The prefetch now.
    size: int = attrs.field(validator=_at_least(0))
    #: Running averages (seconds) of a task's run time and a claim's round
    #: trip; None until the first observation.
    run_ewma: float | None = attrs.field(default=None, validator=_optional_seconds)
    claim_ewma: float | None = attrs.field(default=None, validator=_optional_seconds)
    #: The last ``threads + 1`` run times (seconds), oldest first, for `excess`.
    recent: tuple[float, ...] = ()

    def __attrs_post_init__(self) -> None:
        if self.floor > self.ceiling:
            raise ValueError(f"floor must not exceed ceiling, got {self.floor} > {self.ceiling}")
        if not self.floor <= self.size <= self.ceiling:
            raise ValueError(
                f"size must be within floor..ceiling ({self.floor}..{self.ceiling}), "
                f"got {self.size}"
            )

    @classmethod
    def start(cls, threads: int, *, floor: int = 0, ceiling: int = CEILING) -> Window:
        """A fresh worker's window: as many as its threads, within `floor` and `ceiling`."""
        bare = cls(threads=threads, floor=floor, ceiling=ceiling, size=floor)  # checks them
        return attrs.evolve(bare, size=_starting(bare))


def target(window: Window) -> int:
    """The size the window tends to: `HORIZON` claim round trips of the threads' work.

    ``threads * claim / run * HORIZON`` rounded down, within the bounds; the
    starting size until a run and a claim have been observed. Tasks that
    ran in no measurable time give the ceiling.
    """
    return _target(window, window.run_ewma, window.claim_ewma)


def _target(window: Window, run: float | None, claim: float | None) -> int:
    """`target` of `window` with these averages instead of its own."""
    if run is None or claim is None:
        return _starting(window)
    work = window.threads * claim * HORIZON  # task-seconds the prefetch may hold
    if work >= run * (window.ceiling + 1):  # also when run is 0: no division
        return window.ceiling
    # A hair over the quotient, so that float noise (0.0003 / 0.0001 = 2.9999...) costs no task.
    return min(window.ceiling, max(window.floor, int(work / run * (1 + 1e-9))))


def capacity(window: Window) -> int:
    """How many tasks the worker may hold at once: its threads plus the prefetch."""
    return window.threads + window.size


def observe_run(window: Window, seconds: float) -> Window:
    """A task ran `seconds`; the window shrinks at once if that lowers its target.

    Raises ValueError for a negative, infinite or NaN duration.

    Fast path: one new window built directly, not two `attrs.evolve` (a
    worker observes every task it runs).
    """
    seconds = _seconds("seconds", seconds)
    run = seconds if window.run_ewma is None else _blend(window.run_ewma, seconds, RUN_WEIGHT)
    return Window(
        threads=window.threads,
        floor=window.floor,
        ceiling=window.ceiling,
        size=min(window.size, _target(window, run, window.claim_ewma)),
        run_ewma=run,
        claim_ewma=window.claim_ewma,
        recent=(*window.recent[-window.threads :], seconds),
    )


def excess(window: Window, *, waiting: int, running: int) -> int:
    """How many of the `waiting` prefetched tasks (claimed, not started) to give back now,
    newest first, while `running` tasks run: 0, or all beyond the room kept once that is
    half of what waits or less.

    The room kept for waiting tasks is the capacity less what runs (a
    thread that just finished a task counts as free), by the window, or by
    the shortest of its last ``threads + 1`` runs if that gives more (see
    the module docstring). Until that many runs are seen, nothing goes
    back. Raises ValueError for a negative count.
    """
    for name, value in (("waiting", waiting), ("running", running)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    keep = max(0, capacity(window) - running)
    if 2 * keep > waiting or len(window.recent) <= window.threads:
        return 0  # the usual answers first: a worker asks after every task
    generous = _target(window, min(window.recent), window.claim_ewma)
    keep = max(keep, window.threads + generous - running)
    return waiting - keep if 2 * keep <= waiting else 0


def observe_claim(window: Window, *, asked: int, got: int, round_trip: float) -> Window:
    """A claim for `asked` tasks brought `got` after `round_trip` seconds.

    Full (`got == asked`): the queue has more; the window doubles (from 0,
    to 1), up to its target. Short: the queue ran out; the window goes back
    to the starting size, or the target if that is lower. Either way it
    never stays above the target. Raises ValueError unless
    ``0 <= got <= asked`` and ``asked >= 1``, or for a bad round trip.
    """
    round_trip = _seconds("round_trip", round_trip)
    for name, value in (("asked", asked), ("got", got)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an integer, got {value!r}")
    if asked < 1:
        raise ValueError(f"asked must be >= 1 (no claim asks for nothing), got {asked}")
    if not 0 <= got <= asked:
        raise ValueError(f"got must be within 0..asked ({asked}), got {got}")
    previous = window.claim_ewma
    claim = round_trip if previous is None else _blend(previous, round_trip, CLAIM_WEIGHT)
    after = attrs.evolve(window, claim_ewma=claim)
    goal = target(after)
    grown = max(1, 2 * after.size)  # full: the queue has more
    size = grown if got == asked else _starting(after)  # short: the queue ran out
    return attrs.evolve(after, size=min(size, goal))


def _starting(window: Window) -> int:
    return min(max(window.threads, window.floor), window.ceiling)


def _blend(average: float, value: float, weight: float) -> float:
    return average + weight * (value - average)
