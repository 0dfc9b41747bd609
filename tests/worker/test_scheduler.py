"""The task threads' scheduler, as pure functions: no threads, no backend, no clock.

The table tests pin one rule each. The simulation runs a worker's task
threads step by step (Hypothesis picks which thread moves, what the backend
answers and when time passes) and checks the promises of the schedule
after every move: one call of a kind at a time, no claim once stopping, the
prefetch given back (a stopping worker's, or what an adaptive room no longer
holds), outcomes sent within the delay or once the batch is
full (by the heartbeat thread when every task thread runs a task), marks
and outcomes never due before the heartbeat thread looks, no call during a
backoff, no wait of zero seconds (a spinning thread), no end of the run
while a claim is on its way, and every claimed task run, given back or
acknowledged exactly once.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import attrs
import hypothesis
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from threadmill_core.models import Lease, TaskResult, TaskResultStatus
from threadmill_core.worker import scheduler, upkeep
from threadmill_core.worker.held import HeldTask, Outcome
from threadmill_core.worker.scheduler import (
    EXIT,
    IDLE_WAIT,
    Acknowledge,
    Calls,
    Claim,
    Release,
    Run,
    Schedule,
    Settings,
    Wait,
)

_serial = itertools.count()
LEASE_TTL = timedelta(seconds=30)
POLL = 1.0


def held_task() -> HeldTask:
    """A prefetched task; the scheduler never looks inside one."""
    number = next(_serial)
    record = TaskResult(
        id=f"t{number}", task_path="app:work", status=TaskResultStatus.RUNNING, attempts=1
    )
    lease = Lease(token=f"token-{number}", deadline=datetime(2030, 1, 1, tzinfo=UTC), record=record)
    return HeldTask(lease, LEASE_TTL)


def tasks(count: int) -> tuple[HeldTask, ...]:
    return tuple(held_task() for _ in range(count))


def outcomes(count: int) -> tuple[Outcome, ...]:
    return tuple(Outcome(task, None) for task in tasks(count))


def settings(threads: int = 2, prefetch: int = 4, **changes: object) -> Settings:
    made = Settings.for_worker(
        threads=threads, prefetch=prefetch, poll=POLL, burst=False, max_tasks=None
    )
    return attrs.evolve(made, **changes)


def ask(
    schedule: Schedule,
    given: Settings,
    *,
    now: float = 100.0,
    stopping: bool = False,
    held: int | None = None,
) -> tuple[scheduler.Step, Schedule]:
    """`next_step`, with `held` by default what the schedule itself holds."""
    if held is None:
        held = len(schedule.ready) + len(schedule.unsent) + len(schedule.calls.give_back)
    return scheduler.next_step(schedule, given, now=now, stopping=stopping, held=held)


# --- the settings --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("threads", "prefetch", "refill_at", "ack_batch"),
    [
        (1, 0, 1, 64),  # one thread: claim once everything is free
        (1, 8, 9, 64),
        (1, 64, 65, 65),  # the batch grows to the whole room
        (2, 0, 1, 64),  # several: once half the prefetch is free
        (2, 1, 1, 64),
        (4, 4, 2, 64),
        (4, 9, 5, 64),
        (8, 100, 50, 108),
    ],
)
def test_settings_for_a_worker(threads: int, prefetch: int, refill_at: int, ack_batch: int) -> None:
    """The room, the refill mark and the acknowledgement batch follow from threads and prefetch."""
    made = Settings.for_worker(
        threads=threads, prefetch=prefetch, poll=POLL, burst=True, max_tasks=7
    )
    assert (made.capacity, made.refill_at, made.ack_batch) == (
        threads + prefetch,
        refill_at,
        ack_batch,
    )
    assert (made.ack_delay, made.poll, made.burst, made.max_tasks) == (
        scheduler.ACK_DELAY,
        POLL,
        True,
        7,
    )


# --- one rule at a time --------------------------------------------------------------


def test_an_empty_worker_claims_its_whole_room() -> None:
    """Nothing held: the first claim asks for threads plus prefetch, and is marked in flight."""
    step, after = ask(Schedule(), settings(threads=2, prefetch=4))
    assert step == Claim(6)
    assert after.calls.claiming


def test_one_claim_at_a_time() -> None:
    """While a claim is in flight, another thread with nothing to run waits for it."""
    step, after = ask(Schedule(calls=Calls(claiming=True)), settings())
    assert isinstance(step, Wait)
    assert step.seconds == POLL
    assert after == Schedule(calls=Calls(claiming=True))


@pytest.mark.parametrize(
    ("threads", "prefetch", "ready", "running", "claims"),
    [
        (2, 4, 4, 2, False),  # full
        (2, 4, 3, 2, False),  # one free: less than half the prefetch
        (2, 4, 2, 2, True),  # half the prefetch free: refill
        (2, 4, 0, 0, True),
        (1, 8, 1, 0, False),  # one thread: not while a task is left to run
        (1, 8, 0, 1, True),  # ... but once the prefetch has run out (room 8 of 9: none ready)
        (1, 0, 0, 1, False),  # no room at all
    ],
)
def test_a_claim_refills_once_enough_room_is_free(
    threads: int, prefetch: int, ready: int, running: int, claims: bool
) -> None:
    """A claim waits until `refill_at` is free, or nothing is left to run."""
    given = settings(threads=threads, prefetch=prefetch)
    schedule = Schedule(ready=tasks(ready))
    step, _ = ask(schedule, given, held=ready + running)
    if claims:
        assert step == Claim(given.capacity - ready - running)
    else:
        assert step == (Run(schedule.ready[0]) if ready else Wait(POLL))


def test_the_next_prefetched_task_runs_in_claim_order() -> None:
    """A thread takes the first task of the prefetch; the rest stay in order."""
    ready = tasks(3)
    step, after = ask(Schedule(ready=ready), settings(threads=2, prefetch=4), held=6)
    assert step == Run(ready[0])
    assert after.ready == ready[1:]


def test_a_claim_never_passes_max_tasks() -> None:
    """With max_tasks, a claim asks only for what is left of it, and none once it is reached."""
    given = settings(max_tasks=10)
    step, _ = ask(Schedule(calls=Calls(claimed=8)), given)
    assert step == Claim(2)
    step, after = ask(Schedule(calls=Calls(claimed=10)), given)
    assert step == EXIT
    assert after.calls.exiting


def test_a_claim_that_found_nothing_pauses_the_next() -> None:
    """An empty claim makes the next wait `poll`; the wait says how long; idle, it waits in the
    backend instead."""
    given = settings()
    schedule, _ = scheduler.claimed(
        Schedule(calls=Calls(claiming=True)), given, (), reached=True, now=100.0
    )
    assert schedule.calls == Calls(nothing_until=101.0)
    step, after = ask(schedule, given, now=100.5, held=1)  # a task is still running
    assert step == Wait(0.5)
    step, after = ask(schedule, given, now=100.5, held=0)
    assert step == IDLE_WAIT
    assert after.calls.idle_waiting
    step, _ = ask(after, given, now=100.5, held=0)  # one idle wait at a time
    assert step == Wait(0.5)
    step, _ = ask(scheduler.idle_wait_ended(after), given, now=100.5, held=0)
    assert step == Claim(given.capacity)


def test_a_burst_exits_once_a_claim_found_nothing_and_nothing_is_held() -> None:
    """Burst mode: the empty claim ends the run instead of an idle wait."""
    given = settings(burst=True)
    schedule = Schedule(calls=Calls(nothing_until=101.0))
    assert ask(schedule, given, held=1)[0] == Wait(1.0)  # something still runs
    step, after = ask(schedule, given, held=0)
    assert step == EXIT
    assert ask(after, given, held=0)[0] == EXIT  # and for every other thread


def test_a_claim_that_did_not_get_through_does_not_pause() -> None:
    """A claim refused by an outage is not 'nothing ready': the backoff paces the next."""
    given = settings()
    schedule, _ = scheduler.claimed(
        Schedule(calls=Calls(claiming=True)), given, (), reached=False, now=100.0
    )
    assert schedule.calls == Calls()


def test_a_claim_brings_tasks_into_the_prefetch_and_counts_them() -> None:
    """Claimed tasks join the prefetch behind those already there."""
    first, second = tasks(2), tasks(3)
    schedule = Schedule(ready=first, calls=Calls(claiming=True, claimed=2))
    after, dropped = scheduler.claimed(schedule, settings(), second, reached=True, now=100.0)
    assert dropped == ()
    assert after.ready == first + second
    assert after.calls == Calls(claimed=5)


@pytest.mark.parametrize(
    ("unsent", "age", "ready", "sends"),
    [
        (1, 0.0, 1, False),  # one outcome, fresh, work left: wait for more
        (1, scheduler.ACK_DELAY, 1, True),  # the oldest has waited ACK_DELAY
        (3, 0.0, 1, True),  # the batch is full (ack_batch 3 here)
        (1, 0.0, 0, True),  # nothing left to run meanwhile
    ],
)
def test_outcomes_go_once_the_batch_is_full_old_or_nothing_else_runs(
    unsent: int, age: float, ready: int, sends: bool
) -> None:
    """Outcomes wait to go together, at most `ack_delay` and at most `ack_batch` of them."""
    given = settings(threads=4, prefetch=4, ack_batch=3)
    schedule = Schedule(ready=tasks(ready), unsent=outcomes(unsent), unsent_since=100.0 - age)
    step, after = ask(schedule, given, now=100.0, held=given.capacity)  # no room to claim
    if sends:
        assert step == Acknowledge(schedule.unsent)
        assert (after.unsent, after.calls.acknowledging) == ((), True)
    else:
        assert step == Run(schedule.ready[0])


def test_a_task_given_back_before_starts_once_every_outcome_before_it_landed() -> None:
    """Regression: a task given back after an unrecorded start ran while the outcome of the
    task before it waited for its batch, so its kill charged that finished task too."""
    given = settings(threads=1, prefetch=4)
    suspect = attrs.evolve(held_task().lease, unstarted_expiries=1)
    ready = (HeldTask(suspect, LEASE_TTL), *tasks(1))
    schedule = Schedule(ready=ready, unsent=outcomes(1), unsent_since=100.0)
    step, after = ask(schedule, given, now=100.0, held=given.capacity)  # young: would wait
    assert step == Acknowledge(schedule.unsent)
    step, _ = ask(after, given, now=100.0, held=given.capacity)
    assert step == Wait(POLL), "it must not start while the outcome is on its way"
    sent, _ = scheduler.acknowledged(
        after, schedule.unsent, reached=True, broken=False, now=100.001
    )
    step, _ = ask(sent, given, now=100.001, held=given.capacity)
    assert step == Run(ready[0])


def test_a_due_claim_takes_the_outcomes_along() -> None:
    """A refill is a call anyway: the outcomes go first, then the claim."""
    given = settings(threads=2, prefetch=4)
    schedule = Schedule(ready=tasks(1), unsent=outcomes(1), unsent_since=100.0)
    step, after = ask(schedule, given, now=100.0, held=3)
    assert step == Acknowledge(schedule.unsent)
    step, _ = ask(after, given, now=100.0, held=3)
    assert step == Claim(3)


def test_during_a_backoff_outcomes_past_their_delay_wait_for_the_backoff() -> None:
    """Regression: outcomes older than ACK_DELAY that cannot go yet made a thread wait
    zero seconds, over and over, until the backoff ended (spinning a core)."""
    given = settings()
    schedule = Schedule(
        unsent=outcomes(1), unsent_since=100.0, calls=Calls(claiming=True, retry_at=100.5)
    )
    for now in (100.004, 100.02, 100.3):
        step, _ = ask(schedule, given, now=now, held=3)
        assert step == Wait(pytest.approx(100.5 - now)), now
    # Once the backoff is over they go at once, the other thread claiming meanwhile.
    assert ask(schedule, given, now=100.5, held=3)[0] == Acknowledge(schedule.unsent)


def test_a_stopping_worker_waits_for_a_claim_in_flight_before_it_exits() -> None:
    """Regression: a second thread ended the run while the first one's claim was on its way,
    so the tasks it brought were neither run nor given back, and lapsed."""
    given = settings(threads=2, prefetch=2)
    claiming = Schedule(calls=Calls(claiming=True))
    step, after = ask(claiming, given, stopping=True, held=0)
    assert step == Wait(POLL)
    assert not after.calls.exiting
    brought = tasks(2)
    back, _ = scheduler.claimed(after, given, brought, reached=True, now=100.0)
    step, after = ask(back, given, stopping=True, held=2)
    assert step == Release(brought)
    given_back, _ = scheduler.released(after, brought, reached=True, broken=False)
    assert ask(given_back, given, stopping=True, held=0)[0] == EXIT


def test_one_acknowledgement_at_a_time() -> None:
    """Outcomes gather while a batch is on its way; they go when it is back."""
    given = settings()
    schedule = Schedule(
        unsent=outcomes(2), unsent_since=90.0, calls=Calls(acknowledging=True, claiming=True)
    )
    step, _ = ask(schedule, given, held=5)
    assert step == Wait(POLL)


def test_an_acknowledgement_that_did_not_get_through_goes_again_first() -> None:
    """Never dropped for an outage: the batch goes back in front of newer outcomes."""
    sent, newer = outcomes(2), outcomes(1)
    schedule = Schedule(unsent=newer, unsent_since=105.0, calls=Calls(acknowledging=True))
    after, dropped = scheduler.acknowledged(schedule, sent, reached=False, broken=False, now=110.0)
    assert (after.unsent, after.unsent_since, dropped) == (sent + newer, 105.0, ())
    assert not after.calls.acknowledging
    alone, _ = scheduler.acknowledged(
        Schedule(calls=Calls(acknowledging=True)), sent, reached=False, broken=False, now=110.0
    )
    assert (alone.unsent, alone.unsent_since) == (sent, 110.0)


def test_a_broken_worker_drops_what_it_could_not_send() -> None:
    """After our own error, what did not get through is left to lapse, not sent again."""
    sent = outcomes(2)
    after, dropped = scheduler.acknowledged(
        Schedule(calls=Calls(acknowledging=True)), sent, reached=False, broken=True, now=110.0
    )
    assert (after, dropped) == (Schedule(), sent)
    given_back = tasks(2)
    after, lost = scheduler.released(
        Schedule(calls=Calls(releasing=True)), given_back, reached=False, broken=True
    )
    assert (after, lost) == (Schedule(), given_back)


def test_a_sent_acknowledgement_lets_the_next_claim_go_at_once() -> None:
    """A retry may have made a task ready: the pause after an empty claim ends."""
    schedule = Schedule(calls=Calls(acknowledging=True, nothing_until=150.0))
    after, dropped = scheduler.acknowledged(
        schedule, outcomes(1), reached=True, broken=False, now=110.0
    )
    assert (after, dropped) == (Schedule(), ())


def test_a_stopping_worker_gives_its_prefetch_back_and_claims_nothing() -> None:
    """Stopping: the prefetch goes back in one call, running tasks finish, then the thread exits."""
    given = settings()
    ready = tasks(3)
    step, after = ask(Schedule(ready=ready), given, stopping=True, held=5)
    assert step == Release(ready)
    assert (after.ready, after.calls.give_back, after.calls.releasing) == ((), (), True)
    step, after = ask(after, given, stopping=True, held=5)  # two tasks still run
    assert step == Wait(POLL)
    back, lost = scheduler.released(after, ready, reached=True, broken=False)
    assert (back, lost) == (Schedule(), ())
    step, _ = ask(back, given, stopping=True, held=0)
    assert step == EXIT


def test_a_give_back_that_did_not_get_through_is_tried_again() -> None:
    """Released tasks the backend did not take go back in line for the next release."""
    waiting, failed = tasks(1), tasks(2)
    schedule = Schedule(calls=Calls(releasing=True, give_back=waiting))
    after, lost = scheduler.released(schedule, failed, reached=False, broken=False)
    assert (after.calls, lost) == (Calls(give_back=failed + waiting), ())


def test_a_stopping_worker_still_acknowledges_at_once() -> None:
    """Stopping sends outcomes without waiting for a batch."""
    schedule = Schedule(unsent=outcomes(1), unsent_since=100.0)
    step, _ = ask(schedule, settings(), now=100.0, stopping=True, held=3)
    assert step == Acknowledge(schedule.unsent)


def test_no_call_during_a_backoff() -> None:
    """While the backend is unavailable, the next call waits for `retry_at`, whatever it is."""
    given = settings()
    backing_off = scheduler.backend_unavailable(Schedule(), retry_at=100.25)
    assert backing_off.calls == Calls(failures=1, retry_at=100.25)
    step, _ = ask(backing_off, given, now=100.0, held=1)  # a claim is due
    assert step == Wait(0.25)
    giving_back = backing_off._replace(ready=tasks(2))
    step, _ = ask(giving_back, given, now=100.0, stopping=True, held=3)  # a release is due
    assert step == Wait(0.25)
    assert ask(giving_back, given, now=100.25, stopping=True, held=3)[0] == Release(
        giving_back.ready
    )
    after = scheduler.backend_reached(scheduler.backend_unavailable(backing_off, retry_at=100.5))
    assert after.calls == Calls(retry_at=100.5)
    assert scheduler.backend_reached(after) is after


def test_a_finished_task_is_news_for_the_others_only_when_it_changes_their_answer() -> None:
    """News: the first outcome (it starts the clock), the one filling the batch, or none to run."""
    given = settings(ack_batch=3)
    ready = tasks(1)
    first, news = scheduler.finished(Schedule(ready=ready), given, Outcome(ready[0], None), now=5.0)
    assert (len(first.unsent), first.unsent_since, news) == (1, 5.0, True)
    second, news = scheduler.finished(first, given, Outcome(held_task(), None), now=6.0)
    assert (len(second.unsent), second.unsent_since, news) == (2, 5.0, False)
    third, news = scheduler.finished(second, given, Outcome(held_task(), None), now=7.0)
    assert (len(third.unsent), news) == (3, True)
    last, news = scheduler.finished(Schedule(unsent=outcomes(1)), given, Outcome(held_task(), None),
                                    now=8.0)  # fmt: skip
    assert news  # nothing left to run: a waiting thread may have to send
    assert last.unsent_since == 0.0  # unchanged: the oldest came earlier


def test_maintenance_lets_the_next_claim_go_at_once() -> None:
    """Promoted tasks may be ready: the pause after an empty claim ends."""
    after = scheduler.look_again(Schedule(calls=Calls(nothing_until=150.0)))
    assert after.calls.nothing_until == 0.0


# --- the whole run, simulated ----------------------------------------------------------


@attrs.define
class SimulatedThread:
    """One task thread of the simulation: what it is doing, if anything."""

    doing: scheduler.Step | None = None
    exited: bool = False


class WorkerSimulation(RuleBasedStateMachine):
    """A worker's task threads and a backend, moved one step at a time by Hypothesis."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 1000.0
        self.stopping = False
        self.broken = False
        self.schedule = Schedule()
        self.threads: list[SimulatedThread] = []
        self.given = settings()
        self.backlog = 0
        #: Every task claimed, and where it is now (one place each).
        self.claimed: list[HeldTask] = []
        self.running_tasks: set[int] = set()
        self.acknowledged: list[int] = []
        self.released: list[int] = []
        self.dropped: list[int] = []
        #: The heartbeat thread's call in flight (a Mark, a Release, an Acknowledge), if any.
        self.upkeep: upkeep.Mark | Release | Acknowledge | None = None
        #: The heartbeat thread looks at once (it starts, was woken, or a call of its ended).
        self.upkeep_soon = True
        #: When each running task started, and the tasks whose start a mark recorded.
        self.since: dict[int, float] = {}
        self.recorded: set[int] = set()
        #: `forced_stop` was called: the running tasks are abandoned where they are.
        self.forced = False

    # --- set-up and the world around the threads -----------------------------------

    @initialize(
        threads=st.integers(min_value=1, max_value=4),
        prefetch=st.integers(min_value=0, max_value=6),
        ack_batch=st.integers(min_value=1, max_value=8),
        burst=st.booleans(),
        max_tasks=st.none() | st.integers(min_value=1, max_value=25),
        backlog=st.integers(min_value=0, max_value=30),
    )
    def start(
        self,
        threads: int,
        prefetch: int,
        ack_batch: int,
        burst: bool,
        max_tasks: int | None,
        backlog: int,
    ) -> None:
        made = Settings.for_worker(
            threads=threads, prefetch=prefetch, poll=POLL, burst=burst, max_tasks=max_tasks
        )
        self.given = attrs.evolve(made, ack_batch=ack_batch)
        self.threads = [SimulatedThread() for _ in range(threads)]
        self.backlog = backlog

    def some_thread_runs(self) -> bool:
        return any(not t.exited for t in self.threads)

    @rule(seconds=st.sampled_from([0.001, 0.004, scheduler.ACK_DELAY, 0.3, POLL, 2.5]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds

    @precondition(some_thread_runs)
    @rule(event=st.sampled_from(["enqueue", "stop", "break down", "maintain", "force"]))
    def something_happens(self, event: str) -> None:
        """Tasks arrive, `stop()`, our own bug (`Worker._failed` stops), maintenance ran, or
        `stop_now()`, whose two calls (give back, send) get through."""
        if event == "enqueue":
            self.backlog += 5
        elif event == "stop":
            self.stopping = self.upkeep_soon = True  # `Worker.stop` wakes it
        elif event == "break down":
            self.broken = self.stopping = self.upkeep_soon = True
        elif event == "maintain":
            self.schedule = scheduler.look_again(self.schedule)
        else:
            stop, self.schedule = upkeep.forced_stop(self.schedule)
            assert {id(entry.task) for entry in stop.running} == self.running_tasks
            self.released.extend(id(t) for t in stop.give_back)
            self.backlog += len(stop.give_back)
            self.acknowledged.extend(id(o.held) for o in stop.outcomes)
            self.stopping = self.forced = True

    @precondition(lambda self: bool(self.schedule.ready) and not self.schedule.calls.exiting)
    @rule(data=st.data())
    def the_adaptive_room_shrinks(self, data: st.DataObject) -> None:
        """A run's end left an adaptive room short of what waits (`prefetch_window.excess`):
        the newest prefetched tasks are to be given back."""
        count = data.draw(st.integers(1, len(self.schedule.ready)), label="given back")
        before = self.schedule
        self.schedule = scheduler.give_back(before, count)
        assert self.schedule.ready == before.ready[:-count]
        assert self.schedule.calls.give_back == before.calls.give_back + before.ready[-count:]

    # --- the threads -----------------------------------------------------------------

    def free(self) -> list[int]:
        return [i for i, t in enumerate(self.threads) if t.doing is None and not t.exited]

    def busy(self) -> list[int]:
        return [i for i, t in enumerate(self.threads) if t.doing is not None]

    def held(self) -> int:
        """What `Worker._held` counts: claimed and not forgotten."""
        settled = len(self.acknowledged) + len(self.released) + len(self.dropped)
        return len(self.claimed) - settled

    @precondition(lambda self: bool(self.free()))
    @rule(data=st.data())
    def a_thread_asks(self, data: st.DataObject) -> None:
        index = data.draw(st.sampled_from(self.free()), label="thread")
        before, held = self.schedule, self.held()
        step, after = scheduler.next_step(
            before, self.given, now=self.now, stopping=self.stopping, held=held
        )
        self.check_step(before, after, step, held)
        self.schedule = after
        thread = self.threads[index]
        if step == EXIT:
            thread.exited = True
        elif not isinstance(step, Wait):
            thread.doing = step
            if isinstance(step, Run):
                self.upkeep_soon |= step.wake_upkeep
                self.running_tasks.add(id(step.task))
                self.since[id(step.task)] = self.now

    # --- the heartbeat thread --------------------------------------------------------

    @precondition(lambda self: self.upkeep is None and self.some_thread_runs())
    @rule()
    def the_heartbeat_thread_looks(self) -> None:
        before = self.schedule
        step, after = upkeep.next_upkeep(before, self.given, now=self.now, stopping=self.stopping)
        self.check_upkeep(before, after, step)
        self.schedule = after
        self.upkeep_soon = False
        if isinstance(step, (upkeep.Mark, Release, Acknowledge)):
            self.upkeep = step

    @precondition(lambda self: self.upkeep is not None)
    @rule(got_through=st.booleans())
    def the_heartbeat_call_ends(self, got_through: bool) -> None:
        step, self.upkeep = self.upkeep, None
        self.upkeep_soon = True  # it looks again once its call is done
        s = self.schedule
        if got_through:
            s = scheduler.backend_reached(s)
        elif not self.broken:
            s = scheduler.backend_unavailable(s, retry_at=self.now + 0.1 * (s.calls.failures + 1))
        if isinstance(step, upkeep.Mark):
            if got_through:  # the backend recorded the starts of the tasks still running
                self.recorded.update(id(t) for t in step.tasks if id(t) in self.running_tasks)
            elif self.broken:  # given up: a broken worker does not mark them again
                self.recorded.update(id(t) for t in step.tasks)
            self.schedule = upkeep.marked(s, step.tasks, reached=got_through, broken=self.broken)
        elif isinstance(step, Release):
            if got_through:
                self.released.extend(id(t) for t in step.tasks)
                self.backlog += len(step.tasks)
            self.schedule, lost = scheduler.released(
                s, step.tasks, reached=got_through, broken=self.broken
            )
            self.dropped.extend(id(t) for t in lost)
        elif isinstance(step, Acknowledge):
            if got_through:
                self.acknowledged.extend(id(o.held) for o in step.outcomes)
            self.schedule, dropped = scheduler.acknowledged(
                s, step.outcomes, reached=got_through, broken=self.broken, now=self.now
            )
            self.dropped.extend(id(o.held) for o in dropped)

    def check_upkeep(
        self,
        before: Schedule,
        after: Schedule,
        step: upkeep.Mark | Release | Acknowledge | Wait | None,
    ) -> None:
        c, given = before.calls, self.given
        reachable = self.now >= c.retry_at
        marking = {id(t) for t in self.upkeep.tasks} if self.upkeep is not None else set()
        due = {
            i
            for i in self.running_tasks
            if self.since[i] <= self.now - given.mark_delay and i not in marking
            and i not in self.recorded
        }  # fmt: skip
        releasing = any(isinstance(t.doing, Release) for t in self.threads) or c.releasing
        if isinstance(step, (upkeep.Mark, Release, Acknowledge)):
            assert reachable, f"{step!r} during a backoff"
            assert not c.exiting, "an upkeep call after the run ended"
        late = (
            before.unsent
            and not c.acknowledging
            and self.now - before.unsent_since >= given.ack_delay
        )
        if isinstance(step, Acknowledge):
            assert late, "the heartbeat thread sent outcomes before their delay"
            assert step.outcomes == before.unsent
        if isinstance(step, upkeep.Mark):
            marked = [id(t) for t in step.tasks]
            assert marked, step
            assert set(marked) <= self.running_tasks, "a mark of a task not running (decided?)"
            assert set(marked) == due, "a mark must take every task due, and only those"
        if isinstance(step, Release):
            assert self.stopping, "a give-back while not stopping"
            assert step.tasks, step
            assert not releasing, "two releases at once"
        if isinstance(step, Wait):
            assert step.seconds > 0.0, "the heartbeat thread would spin"
        giving_back = self.stopping and (before.ready or c.give_back) and not releasing
        if late and reachable and not c.exiting and not giving_back:
            assert isinstance(step, Acknowledge), f"late outcomes not sent: {step!r}"
        elif due and reachable and not c.exiting and not giving_back:
            assert isinstance(step, upkeep.Mark), f"due marks not sent: {step!r}"
        if step is None:
            assert not due or c.exiting, "the heartbeat thread idles with marks due"
            waiting = [i for i in self.running_tasks if i not in marking and i not in self.recorded]
            assert not waiting or c.exiting, "idle while a task may need a mark"
            assert not (before.unsent and not c.acknowledging) or c.exiting, "idle with outcomes"
            assert after.calls.upkeep_at == float("inf") or c.exiting

    @precondition(lambda self: bool(self.busy()))
    @rule(data=st.data(), got_through=st.booleans(), found=st.integers(min_value=0, max_value=8))
    def a_thread_finishes(self, data: st.DataObject, got_through: bool, found: int) -> None:
        index = data.draw(st.sampled_from(self.busy()), label="thread")
        thread = self.threads[index]
        if self.forced and isinstance(thread.doing, Run):
            return  # abandoned: the process exits before the task returns
        step, thread.doing = thread.doing, None
        s = self.schedule
        if isinstance(step, Run):
            self.running_tasks.discard(id(step.task))
            self.since.pop(id(step.task))
            self.schedule, _ = scheduler.finished(s, self.given, Outcome(step.task, None),
                                                  now=self.now)  # fmt: skip
            return
        if isinstance(step, scheduler.IdleWait):
            self.schedule = scheduler.idle_wait_ended(s)
            return
        # A backend call: `Worker._call_backend` first, then the step's own ending.
        if got_through:
            s = scheduler.backend_reached(s)
        elif not self.broken:
            s = scheduler.backend_unavailable(s, retry_at=self.now + 0.1 * (s.calls.failures + 1))
        if isinstance(step, Claim):
            brought = tasks(min(step.limit, self.backlog, found)) if got_through else ()
            self.backlog -= len(brought)
            self.claimed.extend(brought)
            self.schedule, lost = scheduler.claimed(s, self.given, brought, reached=got_through,
                                                    now=self.now)  # fmt: skip
            assert not lost or self.forced, "claimed tasks dropped"
            self.dropped.extend(id(t) for t in lost)
        elif isinstance(step, Acknowledge):
            if got_through:
                self.acknowledged.extend(id(o.held) for o in step.outcomes)
            self.schedule, dropped = scheduler.acknowledged(
                s, step.outcomes, reached=got_through, broken=self.broken, now=self.now
            )
            self.dropped.extend(id(o.held) for o in dropped)
        elif isinstance(step, Release):
            if got_through:
                self.released.extend(id(t) for t in step.tasks)
                self.backlog += len(step.tasks)
            self.schedule, lost = scheduler.released(
                s, step.tasks, reached=got_through, broken=self.broken
            )
            self.dropped.extend(id(t) for t in lost)

    # --- what every step must respect ------------------------------------------------

    def check_step(
        self, before: Schedule, after: Schedule, step: scheduler.Step, held: int
    ) -> None:
        c, given = before.calls, self.given
        reachable = self.now >= c.retry_at
        if isinstance(step, (Claim, Acknowledge, Release, scheduler.IdleWait)):
            assert reachable, f"{step!r} during a backoff"
        if isinstance(step, Claim):
            assert not self.stopping, "a stopping worker claimed"
            assert not c.claiming, "two claims at once"
            assert 1 <= step.limit <= given.capacity - held, (step, held)
            if given.max_tasks is not None:
                assert c.claimed + step.limit <= given.max_tasks
        if isinstance(step, Run):
            assert not self.stopping, "a stopping worker started a task"
        if isinstance(step, Acknowledge):
            assert step.outcomes, step
            assert not c.acknowledging, "two acknowledgements at once"
        if isinstance(step, Release):
            assert step.tasks, step
            assert not c.releasing, "two releases at once"
        if isinstance(step, scheduler.IdleWait):
            assert held == 0, "an idle wait while holding tasks"
            assert not c.idle_waiting, "two idle waits at once"
            assert not given.burst, "an idle wait in a burst"
        if self.stopping:
            assert after.ready == (), "a stopping worker kept prefetched tasks"
        due = before.unsent and (
            len(before.unsent) >= given.ack_batch
            or self.now - before.unsent_since >= given.ack_delay
            or self.stopping
        )
        if due and reachable and not c.acknowledging and not isinstance(step, Release):
            assert isinstance(step, Acknowledge), f"due outcomes not sent: {step!r}"
        if isinstance(step, Wait):
            assert 0.0 < step.seconds <= given.poll, "a thread would spin"
            if before.unsent and not c.acknowledging:
                assert not reachable, "a thread waits while outcomes could go"
            if not reachable:
                assert self.now + step.seconds <= c.retry_at + 1e-9, "slept past the backoff"
        if step == EXIT and not c.exiting:
            assert held == 0, "exited holding tasks"
            assert not before.unsent, "exited with outcomes not sent"
            assert not c.give_back, "exited without giving back the prefetch"
            assert not c.claiming, "the run ended while a claim could still bring tasks"

    @invariant()
    def the_schedule_knows_what_runs(self) -> None:
        """`Schedule.running` is what the threads run, marked where a mark got through."""
        running = self.schedule.running
        assert {id(entry.task) for entry in running} == self.running_tasks
        marking = (
            {id(t) for t in self.upkeep.tasks} if isinstance(self.upkeep, upkeep.Mark) else set()
        )
        for entry in running:
            if id(entry.task) in self.recorded:
                assert entry.marked, "a recorded start reads as unmarked: it would be marked again"
            elif id(entry.task) not in marking:
                assert not entry.marked, "a task reads as marked though no mark got through"

    @invariant()
    def the_heartbeat_thread_looks_before_anything_falls_due(self) -> None:
        """Regression: with its only thread in a long task, a worker sent the outcome of the
        task before it only once the long one ended (a kill in between ran it twice).

        Unless it looks at once anyway, the heartbeat thread's next look
        (`Calls.upkeep_at`) comes no later than the first start to mark, nor,
        while every task thread runs a task, than the outcomes' delay.
        """
        s, given = self.schedule, self.given
        c = s.calls
        if c.exiting or self.upkeep_soon or self.upkeep is not None:
            return
        deadlines = [e.since + given.mark_delay for e in s.running if not e.marked]
        live = [t for t in self.threads if not t.exited]
        if s.unsent and not c.acknowledging and all(isinstance(t.doing, Run) for t in live):
            deadlines.append(s.unsent_since + given.ack_delay)
        for deadline in deadlines:
            assert c.upkeep_at <= max(deadline, c.retry_at) + 1e-9, (deadline, c)

    @invariant()
    def one_call_of_each_kind_at_a_time(self) -> None:
        doing = [type(t.doing) for t in self.threads if t.doing is not None]
        if self.upkeep is not None:
            doing.append(type(self.upkeep))
        c = self.schedule.calls
        for kind, flag in [
            (Claim, c.claiming),
            (Acknowledge, c.acknowledging),
            (Release, c.releasing),
            (scheduler.IdleWait, c.idle_waiting),
        ]:
            assert doing.count(kind) == int(flag), (kind, doing, c)

    @invariant()
    def every_claimed_task_is_in_one_place(self) -> None:
        s = self.schedule
        in_flight = [
            id(task)
            for t in self.threads
            for task in (
                [o.held for o in t.doing.outcomes]
                if isinstance(t.doing, Acknowledge)
                else t.doing.tasks
                if isinstance(t.doing, Release)
                else ()
            )
        ]
        if isinstance(self.upkeep, Release):
            in_flight += [id(task) for task in self.upkeep.tasks]
        if isinstance(self.upkeep, Acknowledge):
            in_flight += [id(o.held) for o in self.upkeep.outcomes]
        places = [
            *(id(t) for t in s.ready),
            *(id(o.held) for o in s.unsent),
            *(id(t) for t in s.calls.give_back),
            *self.running_tasks,
            *in_flight,
            *self.acknowledged,
            *self.released,
            *self.dropped,
        ]
        assert sorted(places) == sorted(id(t) for t in self.claimed), "a task lost or doubled"
        assert self.held() <= self.given.capacity
        if self.given.max_tasks is not None:
            assert len(self.claimed) <= self.given.max_tasks

    @invariant()
    def the_run_ends_with_nothing_held(self) -> None:
        """Once every thread exited, each claimed task was acknowledged, given back or dropped."""
        if self.threads and all(t.exited for t in self.threads) and not self.forced:
            assert self.held() == 0, "the run ended holding claimed tasks"
            if not self.broken:
                assert not self.dropped


def test_the_schedule_keeps_its_promises_in_any_interleaving() -> None:
    """Whatever the threads, the backend and the clock do, no promise of the schedule breaks."""
    # Five times the profile's examples: a step costs microseconds here, and the
    # races worth finding need several threads, a stop and a claim to line up.
    more = hypothesis.settings(max_examples=5 * hypothesis.settings().max_examples)
    run_state_machine_as_test(WorkerSimulation, settings=more)


def test_a_stopped_worker_with_a_working_backend_finishes() -> None:
    """Stopping, with every call getting through, every thread exits within a bounded number
    of steps, having acknowledged or given back everything."""
    for threads, prefetch in [(1, 0), (1, 4), (3, 2), (4, 8)]:
        given = Settings.for_worker(
            threads=threads, prefetch=prefetch, poll=POLL, burst=False, max_tasks=None
        )
        schedule = Schedule(ready=tasks(prefetch), unsent=outcomes(2), unsent_since=1.0)
        held = prefetch + 2 + 1  # and one task still running, finishing below
        running: tuple[HeldTask, ...] = (held_task(),)
        exited = 0
        for _ in range(50):
            step, schedule = scheduler.next_step(schedule, given, now=2.0, stopping=True, held=held)
            if isinstance(step, Acknowledge):
                schedule, _ = scheduler.acknowledged(
                    schedule, step.outcomes, reached=True, broken=False, now=2.0
                )
                held -= len(step.outcomes)
            elif isinstance(step, Release):
                schedule, _ = scheduler.released(schedule, step.tasks, reached=True, broken=False)
                held -= len(step.tasks)
            elif isinstance(step, Wait) and running:
                done = Outcome(running[0], None)
                schedule, _ = scheduler.finished(schedule, given, done, now=2.0)
                running = ()
            elif step == EXIT:
                exited += 1
                if exited == threads:
                    break
            else:
                pytest.fail(f"unexpected step while stopping: {step!r}")
        assert (exited, held) == (threads, 0), (threads, prefetch)
