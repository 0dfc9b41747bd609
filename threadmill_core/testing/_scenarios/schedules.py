"""Schedules: N schedulers store each tick once; pause states hold, for every scheduler.

The first is what `@periodic` rests on (see `threadmill_core.worker.scheduling`):
each tick is stored under an id made from its schedule and time, and
`enqueue` is idempotent on id, also within one call, so any number of
schedulers store it once and never revive a tick whose task already ran. A
backend whose `enqueue` is not idempotent on id fails it.
"""

from __future__ import annotations

import random
from datetime import timedelta

from threadmill_core.models import TaskResult
from threadmill_core.periodic import Schedule, tick_id
from threadmill_core.testing._scenarios.kit import (
    READY,
    RUNNING,
    SUCCESSFUL,
    Scenario,
    claim_one,
    expect,
    new_task,
    registering,
    succeeded,
)
from threadmill_core.testing.harness import Harness
from threadmill_core.worker.scheduling import Scheduler

#: This module's scenarios, by name (`threadmill_core.testing.scenarios.SCENARIOS` holds all).
SCENARIOS: dict[str, Scenario] = {}
scenario = registering(SCENARIOS)

MINUTE = timedelta(minutes=1)


@scenario
def five_schedulers_interleaved_store_each_tick_once(harness: Harness) -> None:
    """Five schedulers on one backend, waking in any order, store each tick exactly once."""
    backend = harness.backend
    schedule = Schedule(
        name="kit-every-minute",
        template=TaskResult(id="", task_path="app.tasks:work", queue="ticks"),
        every=MINUTE,
        catch_up=timedelta(0),
    )
    schedulers = [Scheduler(backend, [schedule]) for _ in range(5)]
    rng = random.Random(34)
    # The schedulers' clock: its own, an hour behind the backend's, so that every tick
    # is stored READY on any backend, and the steps need no `advance`. Each pass is a
    # second after a tick, as a scheduler wakes.
    hour_ago = backend.now() - timedelta(hours=1)
    start = now = hour_ago.replace(second=1, microsecond=0)
    for step in range(12):
        # One scheduler wakes every minute (so none is missed); the others at random.
        awake = [schedulers[0], *rng.sample(schedulers[1:], k=rng.randint(0, 4))]
        rng.shuffle(awake)
        for scheduler in awake:
            scheduler.run_pass(now)
        if step % 3 == 2:  # finish the ticks stored so far: none may come back
            while True:
                leases = backend.claim(["ticks"], worker="w", lease_ttl=MINUTE, limit=100)
                if not leases:
                    break
                for lease in leases:
                    backend.complete(lease, succeeded(lease))
        now += MINUTE
    for scheduler in schedulers:
        scheduler.run_pass(now)
    end = now
    ticks = []
    tick = schedule.next_tick(start - timedelta(seconds=2))
    while tick <= end:
        ticks.append(tick)
        tick = schedule.next_tick(tick)
    stored = {
        record.id: record
        for status in (READY, SUCCESSFUL)
        for record in backend.peek("ticks", status, limit=1000)
    }
    expected = sorted(tick_id(schedule.name, tick) for tick in ticks)
    assert len(expected) >= 12, ticks  # the scenario's own arithmetic
    expect(
        sorted(stored) == expected,
        "N schedulers must store each tick once, under its tick id: enqueue is idempotent on id",
        expected,
        sorted(stored),
    )
    counts = backend.counts()["ticks"]
    expect(
        counts.pending + counts.of(SUCCESSFUL) == len(expected) and counts.of(RUNNING) == 0,
        "enqueue() of a tick already stored stored another task",
        len(expected),
        counts,
    )
    revived = [r.id for r in stored.values() if r.status is READY and r.attempts]
    expect(not revived, "enqueue() of a finished task's id sent it back to READY", [], revived)


@scenario
def an_id_given_twice_in_one_enqueue_is_stored_once(harness: Harness) -> None:
    """Of an id given twice in one enqueue() call, the first record is stored and answers both."""
    backend = harness.backend
    got = backend.enqueue([new_task("t", args=[1]), new_task("t", args=[2])])
    expect(
        len(got) == 2 and got[0] == got[1] and got[0].args == [1],
        "enqueue() of one id twice in one call must store the first and answer it twice",
        "[t(args=[1]), t(args=[1])]",
        got,
    )
    lease = claim_one(backend, "t")
    expect(backend.claim(["default"], worker="w", lease_ttl=MINUTE) == [],
           "enqueue() of one id twice in one call stored two tasks")  # fmt: skip
    backend.complete(lease, succeeded(lease))


@scenario
def schedule_pauses_hold_and_keep_their_time(harness: Harness) -> None:
    """set_schedule_paused stores a flag and its time; setting it again changes nothing."""
    backend = harness.backend
    expect(backend.schedule_pauses() == {}, "a new backend has no schedule paused")
    before = backend.now()
    paused = backend.set_schedule_paused("nightly", True)
    expect(paused.paused and paused.since >= before, "set_schedule_paused(True) must store it",
           f"paused, since >= {before}", paused)  # fmt: skip
    harness.advance(MINUTE)
    again = backend.set_schedule_paused("nightly", True)
    expect(again == paused, "pausing a paused schedule must change nothing", paused, again)
    other = backend.set_schedule_paused("poll-eu ünïcode", False)
    resumed = backend.set_schedule_paused("nightly", False)
    # A backend on a server clock that `advance` does not move only gets later.
    later = paused.since + (MINUTE if harness.exact_clock else timedelta(0))
    expect(
        not resumed.paused and resumed.since >= later,
        "resuming must store the flag as of now",
        f"not paused, since >= {later}",
        resumed,
    )
    listed = backend.schedule_pauses()
    expected = {"nightly": resumed, "poll-eu ünïcode": other}
    expect(listed == expected, "schedule_pauses() must list each stored state", expected, listed)
    for bad in ("", "tab\there", "x" * 201):
        try:
            backend.set_schedule_paused(bad, True)
        except ValueError:
            pass
        else:
            expect(False, f"set_schedule_paused({bad!r}) must raise ValueError")
    expect(backend.schedule_pauses() == expected, "a refused name must store nothing")
