"""What a worker's threads do next: pure functions of the run's immutable state.

A worker has no dispatcher thread: each task thread takes the next step
itself. `next_step` chooses it from an immutable `Schedule` (what the
threads of one `Worker.run` share: the prefetch, the tasks running, the
outcomes not sent yet, the calls in flight, the backoff) and what the
thread observes (the time, whether the worker is stopping, how many tasks
it holds). It returns the step and the schedule that taking it leaves; the
thread stores that schedule and does the step. When the step is done, one
of the functions below (`claimed`, `acknowledged`, `released`, ...) gives
the schedule it leaves. The thread code only applies these answers, under
the worker's lock, so every rule about *when* lives here and is tested
without threads.

The steps of a task thread, in the order they are considered:

1. `Release`: give back the prefetched tasks of a stopping worker, in one call;
   or, while it runs, those an adaptive prefetch no longer holds (`give_back`).
2. `Acknowledge`: send the outcomes that have gathered, in one call, once
   `Settings.ack_batch` have gathered, the oldest has waited
   `Settings.ack_delay`, a claim is due (it goes in the same breath), the
   worker is stopping, or no prefetched task is left to run meanwhile.
3. `Claim`: refill the room (free threads and prefetch), once
   `Settings.refill_at` of it is free, or all of it with nothing left to run.
4. `Run`: start the next prefetched task.
5. `Exit`: nothing held, no claim on its way, and nothing more may be
   claimed (stopping, or `max_tasks` reached), or nothing was found in a burst.
6. `IdleWait`: nothing held and the last claim found nothing; block in the
   backend until a task may be ready (one thread at a time).
7. `Wait`: none of the above yet; wait on the worker's condition for at
   most `Wait.seconds` (another thread's step may change the answer sooner).

The heartbeat thread's upkeep (start marks, outcomes left waiting while
every task thread runs a task, a stopping worker's prefetch) and forced
stops are decided in `threadmill_core.worker.upkeep`, from the same schedule. A
`Run` wakes that thread if it would look too late for what the start
leaves due (`Run.wake_upkeep`, `Calls.upkeep_at`).

No two calls of one kind are in flight at once, and while the backend is
unavailable (`backend_unavailable`), no call is made before `Calls.retry_at`.

The state is named tuples, not attrs classes: a new schedule is made at two
steps of every task (its start and its end), and a named tuple is the
cheapest immutable record to build; `Calls` changes only once per call. The
steps are attrs classes, so that two kinds of step never compare equal, but
for `Run`, made for every task: a named tuple equal only to a `Run`.

A new kind of step is a class here added to `Action`, its place in
`next_step`'s order, a function for the schedule its ending leaves, and a
case in `Worker._task_thread`, which mypy insists on; the simulation in
tests/worker/test_scheduler.py then checks it against every promise above.
"""

from __future__ import annotations

from typing import NamedTuple

import attrs

from threadmill_core.worker.held import HeldTask, Outcome

#: Outcomes are acknowledged in batches of up to this many (or the worker's
#: whole room, threads plus prefetch, if that is more: a claim sends what has
#: gathered anyway, and one more round trip per claim would only split it) ...
ACK_BATCH = 64
#: ... or once the oldest has waited this long (seconds), whichever comes
#: first. The delay bounds how late a result shows while tasks keep coming;
#: an idle worker sends what it has at once.
ACK_DELAY = 0.010
#: A task's start is recorded once it has run this long (seconds) without an
#: outcome. Shorter tasks are never marked; a worker that dies within this
#: long of a start leaves that task uncharged (see `Backend.claim_expired`).
#: Ten acknowledgement delays: at most ten marks a second, however many run.
MARK_DELAY = 0.1


@attrs.frozen(kw_only=True)
class Settings:
    """What stays fixed for one `Worker.run`, but for the room with an adaptive prefetch."""

    #: Tasks the worker may hold at once: its threads plus its prefetch.
    capacity: int
    #: How much free room makes a claim worth it while prefetched tasks wait.
    refill_at: int
    #: Send outcomes once this many have gathered.
    ack_batch: int
    #: ... or once the oldest has waited this long (seconds).
    ack_delay: float
    #: Record a task's start once it has run this long (seconds).
    mark_delay: float
    #: The longest single wait (seconds), and the pause after a claim that found nothing.
    poll: float
    #: Exit once a claim finds nothing and nothing is held.
    burst: bool
    #: Claim no more than this many tasks in the run; None: no limit.
    max_tasks: int | None

    @classmethod
    def for_worker(
        cls, *, threads: int, prefetch: int, poll: float, burst: bool, max_tasks: int | None
    ) -> Settings:
        """The settings of a worker with `threads` task threads and `prefetch`.

        A claim refills the room once half the prefetch is free: the other
        threads run what is left while one claims the next batch. With one
        thread, once all of it is free: nothing runs while the only thread
        claims anyway, so it claims when it has run out, and each claim
        brings a batch twice the size. (Claiming the next batch from the
        heartbeat thread while the task thread runs was measured for issue
        38, in interleaved in-process drains of 5,000 tasks: 0.98 times the
        drain at ``--prefetch 64``, 1.00 with the adaptive prefetch. Redis
        runs the claim's script and the task's own commands one after
        another, and the claim's reply is parsed under the GIL, so little
        but a round trip overlaps; it was not kept.) Outcomes go in batches of
        `ACK_BATCH`, or of the whole room if that is more.
        """
        capacity, refill_at, ack_batch = _room(threads, prefetch)
        return cls(
            capacity=capacity,
            refill_at=refill_at,
            ack_batch=ack_batch,
            ack_delay=ACK_DELAY,
            mark_delay=MARK_DELAY,
            poll=poll,
            burst=burst,
            max_tasks=max_tasks,
        )

    def resized(self, *, threads: int, prefetch: int) -> Settings:
        """These settings with the room of `threads` and `prefetch`, as `for_worker` sizes it.

        A worker with an adaptive prefetch (`threadmill_core.worker.prefetch_window`)
        swaps them in as its window changes; the next claim follows the new room.
        Tasks already held beyond a room that shrank are kept and run, unless slow
        runs in a row shrank it to half of them or less (`prefetch_window.excess`):
        the worker then hands the excess to `give_back`. A room also shrinks on one
        slow run, and giving back then would cost a call each time and send the
        tasks to the tail of READY.
        """
        capacity, refill_at, ack_batch = _room(threads, prefetch)
        return attrs.evolve(self, capacity=capacity, refill_at=refill_at, ack_batch=ack_batch)


def _room(threads: int, prefetch: int) -> tuple[int, int, int]:
    """`Settings.capacity`, `refill_at` and `ack_batch` for `threads` and `prefetch`."""
    refill_at = 1 + prefetch if threads == 1 else max(1, (prefetch + 1) // 2)
    return threads + prefetch, refill_at, max(ACK_BATCH, threads + prefetch)


class Calls(NamedTuple):
    """The backend calls of one run: which are in flight, and when the next may go.

    Changes once per call, not once per task (see `Schedule`).
    """

    #: A thread is making that call now (one at a time of each).
    claiming: bool = False
    acknowledging: bool = False
    releasing: bool = False
    idle_waiting: bool = False
    #: Prefetched tasks the next release call gives back (the worker is stopping,
    #: or its adaptive room shrank: see `give_back`).
    give_back: tuple[HeldTask, ...] = ()
    #: Tasks claimed so far in this run, less those given back while it runs.
    claimed: int = 0
    #: A claim found nothing: the next waits until then.
    nothing_until: float = 0.0
    #: During an outage: when to call the backend again, and how many calls
    #: in a row failed.
    retry_at: float = 0.0
    failures: int = 0
    #: The latest time the heartbeat thread looks again (`next_upkeep`); inf
    #: when nothing is due (a mark, outcomes) and it waits for its next beat.
    upkeep_at: float = 0.0
    #: A thread decided the run is over; no more calls, every thread exits.
    exiting: bool = False


class Running(NamedTuple):
    """A task a thread is running: since when (`time.monotonic()`), and whether a `Mark`
    has recorded its start (or is recording it now)."""

    since: float
    task: HeldTask
    marked: bool = False


class Schedule(NamedTuple):
    """What the threads of one `Worker.run` share; times are `time.monotonic()`.

    Split by how often it changes: the fields here once or twice per task,
    `calls` once per backend call.
    """

    #: Prefetched tasks no thread has started, in claim order.
    ready: tuple[HeldTask, ...] = ()
    #: Tasks started and without an outcome yet, in start order.
    running: tuple[Running, ...] = ()
    #: Outcomes not acknowledged yet, and when the oldest of them came back.
    unsent: tuple[Outcome, ...] = ()
    unsent_since: float = 0.0
    calls: Calls = Calls()


@attrs.frozen
class Claim:
    """Claim up to `limit` tasks, then `claimed`."""

    limit: int


@attrs.frozen
class Acknowledge:
    """Send `outcomes` in one call, then `acknowledged`."""

    outcomes: tuple[Outcome, ...]


@attrs.frozen
class Release:
    """Give back `tasks` (prefetched, never started) in one call, then `released`."""

    tasks: tuple[HeldTask, ...]


@attrs.frozen
class Run:
    """Run `task`, then `finished` with its outcome; first wake the heartbeat thread, if
    `wake_upkeep` (it would look too late to mark this task or send the outcomes left)."""

    task: HeldTask
    wake_upkeep: bool = False


@attrs.frozen
class IdleWait:
    """Block in the backend until a task may be ready, then `idle_wait_ended`."""


@attrs.frozen
class Wait:
    """Nothing to do yet: wait for another thread's news, at most `seconds`, and ask again."""

    seconds: float


@attrs.frozen
class Exit:
    """The run is over for this thread."""


#: What a task thread does; the thread code handles each kind.
Action = Claim | Acknowledge | Release | Run | IdleWait | Exit
Step = Action | Wait

IDLE_WAIT = IdleWait()
EXIT = Exit()


def next_step(
    schedule: Schedule, settings: Settings, *, now: float, stopping: bool, held: int
) -> tuple[Step, Schedule]:
    """The step a task thread takes next, and the schedule it leaves.

    `now` is `time.monotonic()`, `stopping` whether `Worker.stop` was
    called, `held` how many tasks the worker holds in all (prefetched,
    running, or waiting to be acknowledged or given back).
    """
    ready, running, unsent, since, c = schedule
    if c.exiting:
        return EXIT, schedule
    if stopping and ready:  # a stopping worker starts nothing more: give it all back
        c = c._replace(give_back=c.give_back + ready)
        ready = ()
        schedule = Schedule(
            ready=ready, running=running, unsent=unsent, unsent_since=since, calls=c
        )
    reachable = now >= c.retry_at
    if c.give_back and reachable and not c.releasing:
        calls = c._replace(give_back=(), releasing=True)
        return Release(c.give_back), Schedule(
            ready=ready, running=running, unsent=unsent, unsent_since=since, calls=calls
        )
    # Room for a claim: none while stopping, nor past max_tasks.
    room = 0 if stopping else settings.capacity - held
    if settings.max_tasks is not None:
        room = min(room, settings.max_tasks - c.claimed)
    claim = (
        room > 0
        and (room >= settings.refill_at or not ready)
        and now >= c.nothing_until
        and not c.claiming
    )
    # A task given back before starts once every outcome before it landed: should it
    # kill the worker, it alone is charged (see `HeldTask.given_back`).
    clear = not (ready and ready[0].given_back and (unsent or c.acknowledging))
    # Outcomes wait a moment to go in one batch, unless a call goes anyway
    # (a refill) or there is nothing left to run meanwhile.
    if (
        unsent
        and reachable
        and not c.acknowledging
        and (
            claim
            or stopping
            or not clear
            or not ready
            or len(unsent) >= settings.ack_batch
            or now - since >= settings.ack_delay
        )
    ):
        calls = c._replace(acknowledging=True)
        return Acknowledge(unsent), Schedule(
            ready=ready, running=running, unsent=(), unsent_since=since, calls=calls
        )
    if claim and reachable:
        calls = c._replace(claiming=True)
        return Claim(room), Schedule(
            ready=ready, running=running, unsent=unsent, unsent_since=since, calls=calls
        )
    if ready and clear:
        task = ready[0]
        running = (*running, Running(since=now, task=task, marked=False))
        # The heartbeat thread marks this task, and sends the outcomes left behind, when due.
        due = now + settings.mark_delay
        if unsent and not c.acknowledging:
            due = min(due, since + settings.ack_delay)
        if c.upkeep_at > max(due, c.retry_at):
            c = c._replace(upkeep_at=now)  # woken, it looks at once
            after = Schedule(
                ready=ready[1:], running=running, unsent=unsent, unsent_since=since, calls=c
            )
            return Run(task=task, wake_upkeep=True), after
        return Run(task=task, wake_upkeep=False), Schedule(
            ready=ready[1:], running=running, unsent=unsent, unsent_since=since, calls=c
        )
    idle = not held and not unsent and not c.give_back
    # Stopped, or claimed all it may; not while a claim may still bring tasks.
    if idle and (stopping or room <= 0) and not c.claiming:
        return EXIT, schedule._replace(calls=c._replace(exiting=True))
    if idle and reachable and now < c.nothing_until and not c.claiming:
        if settings.burst:
            return EXIT, schedule._replace(calls=c._replace(exiting=True))
        if not c.idle_waiting:
            return IDLE_WAIT, schedule._replace(calls=c._replace(idle_waiting=True))
    # Outcomes waiting here cannot go before `retry_at` (due ones went above).
    pause = settings.poll
    if not reachable:
        pause = min(pause, c.retry_at - now)
    elif room > 0 and not c.claiming and c.nothing_until > now:
        pause = min(pause, c.nothing_until - now)
    return Wait(pause), schedule


# --- what a finished step leaves -------------------------------------------------------


def claimed(
    schedule: Schedule,
    settings: Settings,
    tasks: tuple[HeldTask, ...],
    *,
    reached: bool,
    now: float,
) -> tuple[Schedule, tuple[HeldTask, ...]]:
    """A `Claim` brought `tasks` (none if the call did not get through); the schedule, and
    the tasks to drop.

    A claim that got through and found nothing makes the next one wait
    `Settings.poll`. Tasks that come back after a forced stop are dropped:
    nothing runs or gives them back any more, and since none of them
    started, their leases lapse and the reaper gives them back uncharged.
    """
    c = schedule.calls
    calls = c._replace(
        claiming=False,
        claimed=c.claimed + len(tasks),
        nothing_until=now + settings.poll if reached and not tasks else c.nothing_until,
    )
    if c.exiting:
        return schedule._replace(calls=calls), tasks
    return schedule._replace(ready=schedule.ready + tasks, calls=calls), ()


def acknowledged(
    schedule: Schedule,
    outcomes: tuple[Outcome, ...],
    *,
    reached: bool,
    broken: bool,
    now: float,
) -> tuple[Schedule, tuple[Outcome, ...]]:
    """An `Acknowledge` of `outcomes` ended; the schedule, and the outcomes to drop.

    Sent (`reached`): a retry may have made a task ready, so the next claim
    need not wait. Not sent because the backend is unavailable: the same
    outcomes go again, first, once it is back. Not sent and the worker is
    `broken` (it met an error of its own and is stopping): they are dropped,
    and their leases lapse for the reaper to decide.
    """
    c = schedule.calls
    if reached:
        return schedule._replace(calls=c._replace(acknowledging=False, nothing_until=0.0)), ()
    calls = c._replace(acknowledging=False)
    if broken or c.exiting:
        return schedule._replace(calls=calls), outcomes
    since = schedule.unsent_since if schedule.unsent else now
    again = schedule._replace(unsent=outcomes + schedule.unsent, unsent_since=since, calls=calls)
    return again, ()


def released(
    schedule: Schedule, tasks: tuple[HeldTask, ...], *, reached: bool, broken: bool
) -> tuple[Schedule, tuple[HeldTask, ...]]:
    """A `Release` of `tasks` ended; the schedule, and the tasks to drop.

    Not given back because the backend is unavailable, they are given back
    again once it is; a `broken` worker drops them (their leases lapse, and
    since none of them started, the reaper gives them back uncharged).
    """
    c = schedule.calls
    if reached:
        return schedule._replace(calls=c._replace(releasing=False)), ()
    if broken or c.exiting:
        return schedule._replace(calls=c._replace(releasing=False)), tasks
    calls = c._replace(releasing=False, give_back=tasks + c.give_back)
    return schedule._replace(calls=calls), ()


def give_back(schedule: Schedule, count: int) -> Schedule:
    """The newest `count` prefetched tasks go back, not started (the next free thread's
    `Release`, then `released`): an adaptive room shrank under them (see
    `prefetch_window.excess`). They no longer count as claimed in this run, so
    `Settings.max_tasks` counts the tasks kept. Nothing changes for `count` <= 0.
    """
    ready = schedule.ready
    count = min(count, len(ready))
    if count <= 0:
        return schedule
    c = schedule.calls
    calls = c._replace(give_back=c.give_back + ready[-count:], claimed=c.claimed - count)
    return schedule._replace(ready=ready[:-count], calls=calls)


def idle_wait_ended(schedule: Schedule) -> Schedule:
    """An `IdleWait` ended (woken, timed out or failed): claim again."""
    calls = schedule.calls._replace(idle_waiting=False, nothing_until=0.0)
    return schedule._replace(calls=calls)


def finished(
    schedule: Schedule, settings: Settings, outcome: Outcome, *, now: float
) -> tuple[Schedule, bool]:
    """A `Run` ended with `outcome`, which waits to be acknowledged; the schedule, and whether
    the other threads must look again.

    They may be waiting for the batch (its first outcome starts the
    `ack_delay` clock; a full one goes at once) or for work; a thread with
    more to run sends the batch itself, on its next step.
    """
    ready, running, unsent, since, calls = schedule
    task = outcome.held
    if running and running[0].task is task:  # the usual case: the oldest ends first
        running = running[1:]
    else:
        running = tuple(entry for entry in running if entry.task is not task)
    if not unsent:
        since = now
    unsent = (*unsent, outcome)
    after = Schedule(ready=ready, running=running, unsent=unsent, unsent_since=since, calls=calls)
    return after, len(unsent) in (1, settings.ack_batch) or not ready


def look_again(schedule: Schedule) -> Schedule:
    """Tasks may be ready (maintenance promoted some): the next claim need not wait."""
    return schedule._replace(calls=schedule.calls._replace(nothing_until=0.0))


def backend_unavailable(schedule: Schedule, *, retry_at: float) -> Schedule:
    """A call found the backend unavailable: no call before `retry_at`.

    `Calls.failures` counts the calls in a row that failed, for the backoff.
    """
    c = schedule.calls
    return schedule._replace(calls=c._replace(failures=c.failures + 1, retry_at=retry_at))


def backend_reached(schedule: Schedule) -> Schedule:
    """A call got through: the backoff starts again from the first delay."""
    c = schedule.calls
    return schedule if c.failures == 0 else schedule._replace(calls=c._replace(failures=0))
