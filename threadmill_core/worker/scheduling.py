"""The scheduler: stores each tick of the declared schedules, once, however many run.

`due` is the whole rule of *which* ticks a scheduler stores, a pure
function of a schedule, the last time this scheduler looked, and now, so
it is tested without threads on a fake clock. `Scheduler` applies it: it
wakes at the next tick of any schedule, stores the due ticks of all of
them in one `Backend.enqueue` call (per `BATCH`; each under its
`tick_id`, `run_after` the tick), and sleeps again. `enqueue` is
idempotent on id, so a tick stored by another scheduler first is not
stored again: every ``threadmill worker`` runs one, in its supervisor
process, and no lock or leader is needed.

Missed ticks. A scheduler that has just started (or was stalled, or cut
off from the backend) looks back `Schedule.catch_up` (default one hour)
and stores the ticks it finds there that are not stored yet, at most the
`CATCH_UP_TICKS` latest; older ones are skipped, and the skip logged. A
tick at or before the moment its schedule was last resumed is never
caught up: it was paused.

Paused schedules (`Backend.set_schedule_paused`) store no ticks, for every
scheduler: each pass with a tick due reads the pauses in one call.

Overlap. A schedule with ``overlap=False`` has at most one tick stored per
pass: of the ticks due, only the latest (the others are skipped and
logged). That tick is skipped too while the task of the latest tick stored
before it, or of the last tick this scheduler stored, is pending or
running. Tick ids are derived from the ticks, so the stored one is found
by asking `Backend.get` for the ids of the ticks before it, latest first,
over skipped (never stored) ones, at most `OVERLAP_LOOK_BACK` of them: a
scheduler that did not store the pending tick (one restarted, or added)
sees it as well as the one that did.
"""

from __future__ import annotations

import heapq
import logging
import threading
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

import attrs

from threadmill_core.backend import Backend
from threadmill_core.clock import from_ms, to_ms
from threadmill_core.errors import BackendUnavailable
from threadmill_core.models import TaskResult, TaskResultStatus
from threadmill_core.pauses import SchedulePause
from threadmill_core.periodic import (
    CATCH_UP_TICKS,
    Schedule,
    registered_schedules,
    tick_id,
    to_ms_delta,
)

log = logging.getLogger("threadmill.schedules")

#: How late a tick may be stored whatever its schedule's `catch_up` (even 0): a
#: scheduler wakes a little after a tick, and may be held up a few seconds.
LATE_GRACE = timedelta(seconds=10)
#: How many ticks one `Backend.enqueue` call stores at most (the backends slice a
#: long batch into round trips of their own: 10,000 in one call took 0.3-0.6 s on
#: Redis and PostgreSQL, against 0.5-1.1 s in calls of 1,000).
BATCH = 10_000
#: The longest a scheduler sleeps without looking at the backend's clock again.
MAX_SLEEP = 60.0
#: How many ticks before a tick an ``overlap=False`` schedule looks back for the latest
#: one stored, one `Backend.get` each (while the latest is stored, one get in all).
OVERLAP_LOOK_BACK = 100
_PENDING = frozenset({TaskResultStatus.READY, TaskResultStatus.DEFERRED, TaskResultStatus.RUNNING})


@attrs.frozen
class Due:
    """What `due` found: the ticks to store (oldest first) and the missed ones skipped."""

    ticks: list[datetime]
    #: Missed ticks not stored: before the catch-up window, or past `CATCH_UP_TICKS`.
    skipped: int
    #: The first tick after now.
    next_tick: datetime


def due(
    schedule: Schedule,
    seen: datetime | None,
    now: datetime,
    *,
    resumed: datetime | None = None,
) -> Due:
    """The ticks of `schedule` a scheduler that last looked at `seen` stores at `now`.

    The ticks in (`seen`, `now`], but none at or before `now - catch_up`
    (`LATE_GRACE` at least; counted as skipped) nor at or before `resumed`, and of the rest only
    the `CATCH_UP_TICKS` latest (the others counted as skipped). `seen`
    None (a scheduler that has just started) looks back the whole
    catch-up window, and what lies before it was not missed by this
    scheduler: it counts nothing as skipped.
    """
    window = now - max(schedule.catch_up, LATE_GRACE)
    start = window if seen is None or seen < window else seen
    skipped = 0 if seen is None or seen >= window else _count(schedule, seen, window)
    if resumed is not None and resumed > start:
        start = resumed
    ticks, more = _ticks(schedule, start, now)
    return Due(ticks=ticks, skipped=skipped + more, next_tick=schedule.next_tick(now))


def _ticks(schedule: Schedule, after: datetime, until: datetime) -> tuple[list[datetime], int]:
    """The `CATCH_UP_TICKS` latest ticks in (`after`, `until`], and how many earlier ones (a
    cron schedule's: at most about 10,000 counted; see `_near_the_end`)."""
    if schedule.every is not None:
        period = to_ms_delta(schedule.every)
        first, last = to_ms(after) // period + 1, to_ms(until) // period
        if last < first:
            return [], 0
        kept = max(first, last - CATCH_UP_TICKS + 1)
        return [from_ms(n * period) for n in range(kept, last + 1)], kept - first
    ticks: list[datetime] = []
    after, more = _near_the_end(schedule, after, until)
    tick = schedule.next_tick(after)
    while tick <= until:
        ticks.append(tick)
        if len(ticks) > CATCH_UP_TICKS:
            del ticks[0]
            more += 1
        tick = schedule.next_tick(tick)
    return ticks, more


def _near_the_end(schedule: Schedule, after: datetime, until: datetime) -> tuple[datetime, int]:
    """Where `_ticks` starts walking a cron schedule forward in (`after`, `until`], and how many
    ticks it steps over (`_count`'s, at most 10,000 counted).

    A window holding many ticks (a per-second cron and a day of catch-up) is not walked tick
    by tick: the walk starts at the `2 * CATCH_UP_TICKS`-th tick before `until`, found
    walking back. The ticks kept are still those `next_tick` gives, so their ids are the
    same as a walk from `after` would make; the margin covers a repeated hour that the two
    directions read differently.
    """
    start = until + timedelta(milliseconds=1)  # `previous_tick` is strictly before
    for _ in range(2 * CATCH_UP_TICKS):
        earlier = schedule.previous_tick(start)
        if earlier is None or earlier <= after:
            return after, 0
        start = earlier
    return start, _count(schedule, after, start)


def _count(schedule: Schedule, after: datetime, until: datetime) -> int:
    """How many ticks lie in (`after`, `until`] (for a cron schedule, at most 10,000 counted)."""
    if schedule.every is not None:
        period = to_ms_delta(schedule.every)
        return max(to_ms(until) // period - to_ms(after) // period, 0)
    count, tick = 0, schedule.next_tick(after)
    while tick <= until and count < 10_000:
        count, tick = count + 1, schedule.next_tick(tick)
    return count


def tick_record(schedule: Schedule, tick: datetime) -> TaskResult:
    """The record of `schedule`'s tick at `tick`: its call under `tick_id`, due at the tick."""
    template = schedule.template  # made directly: `attrs.evolve` costs more, 10,000 times
    return TaskResult(
        id=tick_id(schedule.name, tick),
        task_path=template.task_path,
        args=list(schedule.args),
        kwargs=dict(schedule.kwargs),
        queue=template.queue,
        priority=template.priority,
        run_after=tick,
        retry=template.retry,
    )


class Scheduler:
    """Stores the due ticks of `schedules` in `backend`; see the module doc.

    `run_pass` is one wake-up (tests call it on a fake clock); `run` loops
    until its stop event is set, sleeping until the next tick.
    """

    def __init__(self, backend: Backend, schedules: Iterable[Schedule]) -> None:
        self.backend = backend
        self.schedules = {schedule.name: schedule for schedule in schedules}
        self._seen: dict[str, datetime] = {}
        #: The last tick id this scheduler stored (or found stored) per schedule.
        self._last: dict[str, str] = {}
        self._heap: list[tuple[datetime, str]] = []
        self.stored = 0  # ticks this scheduler stored or found stored

    def run_pass(self, now: datetime) -> datetime | None:
        """Store every tick due at `now`; the time of the next tick (None: no schedules).

        On an exception (the backend unavailable) nothing is counted as
        done: the next pass tries the same ticks again.
        """
        if not self._heap:
            self._heap = [
                (s.next_tick(now - max(s.catch_up, LATE_GRACE)), n)
                for n, s in self.schedules.items()
            ]
            heapq.heapify(self._heap)
        if not self._heap:
            return None
        if self._heap[0][0] > now:
            return self._heap[0][0]
        names: list[str] = []
        while self._heap and self._heap[0][0] <= now:
            names.append(heapq.heappop(self._heap)[1])
        try:
            records, nexts = self._due(names, now)
            self._store(records)
        except BaseException:
            for name in names:
                heapq.heappush(self._heap, (now, name))
            raise
        for name in names:
            self._seen[name] = now
            heapq.heappush(self._heap, (nexts[name], name))
        return self._heap[0][0]

    def _due(
        self, names: list[str], now: datetime
    ) -> tuple[list[tuple[Schedule, TaskResult]], dict[str, datetime]]:
        pauses = self._pauses()
        records: list[tuple[Schedule, TaskResult]] = []
        nexts: dict[str, datetime] = {}
        for name in names:
            schedule = self.schedules[name]
            pause = pauses.get(name)
            found = due(schedule, self._seen.get(name), now, resumed=pause.since if pause else None)
            nexts[name] = found.next_tick
            if pause is not None and pause.paused:
                log.info("schedule %s is paused: tick(s) %s not stored", name,
                         ", ".join(t.isoformat() for t in found.ticks))  # fmt: skip
                continue
            if found.skipped:
                # At start, earlier schedulers may well have stored them: not news.
                level = logging.WARNING if name in self._seen else logging.INFO
                log.log(level, "schedule %s: %d missed tick(s) older than its catch-up window "
                        "(%s, at most %d ticks) skipped", name, found.skipped, schedule.catch_up,
                        CATCH_UP_TICKS)  # fmt: skip
            ticks = found.ticks
            if not schedule.overlap and ticks:
                ticks = self._without_overlap(schedule, ticks)
            records.extend((schedule, tick_record(schedule, tick)) for tick in ticks)
        return records, nexts

    def _pauses(self) -> Mapping[str, SchedulePause]:
        return self.backend.schedule_pauses()

    def _without_overlap(self, schedule: Schedule, ticks: list[datetime]) -> list[datetime]:
        """The due `ticks` (oldest first) an ``overlap=False`` schedule stores: the latest,
        unless an earlier tick's task is pending or running; at most one, in any case."""
        latest = ticks[-1]
        if len(ticks) > 1:
            log.info("schedule %s: %d earlier due tick(s) not stored, only the latest (%s) "
                     "(overlap=False)", schedule.name, len(ticks) - 1,
                     latest.isoformat())  # fmt: skip
        return [] if self._overlaps(schedule, latest) else [latest]

    def _overlaps(self, schedule: Schedule, tick: datetime) -> bool:
        """Whether the task of the latest tick stored before `tick` (of the `OVERLAP_LOOK_BACK`
        before it), or of the last tick this scheduler stored, is still pending or running."""
        own = tick_id(schedule.name, tick)
        last = self._last.get(schedule.name)
        if last is not None and last != own and self._pending(schedule, tick, last):
            return True
        earlier = schedule.previous_tick(tick)
        for _ in range(OVERLAP_LOOK_BACK):
            if earlier is None:
                break
            task_id = tick_id(schedule.name, earlier)
            if task_id == last:  # asked already
                return False
            record = self.backend.get(task_id)
            if record is not None:  # the latest tick stored: it alone decides
                return self._pending(schedule, tick, task_id, record)
            earlier = schedule.previous_tick(earlier)
        return False

    def _pending(
        self, schedule: Schedule, tick: datetime, task_id: str, record: TaskResult | None = None
    ) -> bool:
        """Whether task `task_id` (its `record`, if read already) is pending or running; if so,
        `tick` is skipped, and the skip logged."""
        if record is None:
            record = self.backend.get(task_id)
        if record is None or record.status not in _PENDING:
            return False
        log.info("schedule %s: tick %s skipped, the task of an earlier tick (%s) is %s "
                 "(overlap=False)", schedule.name, tick.isoformat(), task_id,
                 record.status.value)  # fmt: skip
        return True

    def _store(self, records: list[tuple[Schedule, TaskResult]]) -> None:
        for start in range(0, len(records), BATCH):
            chunk = records[start : start + BATCH]
            self.backend.enqueue([record for _, record in chunk])
            for schedule, record in chunk:
                self._last[schedule.name] = record.id
            self.stored += len(chunk)

    def run(self, stop: threading.Event) -> None:
        """Pass after pass until `stop` is set; the backend's clock says what is due.

        An unavailable backend is logged once per outage and tried again
        with a growing pause (1 s to 30 s); any other error is logged and
        tried again a second later.
        """
        failures = 0
        while not stop.is_set():
            try:
                now = self.backend.now()
                next_tick = self.run_pass(now)
            except BackendUnavailable as exc:
                if not failures:
                    log.warning("scheduler: backend unavailable (%s); trying again", exc)
                failures += 1
                stop.wait(min(2.0 ** (failures - 1), 30.0))
                continue
            except Exception:
                log.exception("scheduler pass failed; trying again in a second")
                stop.wait(1.0)
                continue
            if failures:
                log.info("scheduler: backend reached again")
                failures = 0
            if next_tick is None:
                return
            wait = (next_tick - now) / timedelta(seconds=1)
            stop.wait(min(max(wait, 0.0), MAX_SLEEP))


def start_scheduler(
    backend: Backend, schedules: Iterable[Schedule] | None = None
) -> tuple[threading.Thread, threading.Event] | None:
    """Run a `Scheduler` of `schedules` (default: all declared in this process) in a daemon
    thread; None when there are none.

    Returns the thread and the event that stops it.
    """
    if schedules is None:
        schedules = registered_schedules().values()
    scheduler = Scheduler(backend, schedules)
    if not scheduler.schedules:
        return None
    stop = threading.Event()
    thread = threading.Thread(target=scheduler.run, args=(stop,), name="threadmill-scheduler",
                              daemon=True)  # fmt: skip
    thread.start()
    log.info("scheduling %d schedule(s): %s", len(scheduler.schedules),
             ", ".join(sorted(scheduler.schedules)))  # fmt: skip
    return thread, stop
