"""Periodic tasks: ``@periodic`` declares a schedule, every ``threadmill worker`` keeps it.

::

    from datetime import timedelta
    from threadmill_core import periodic, task

    @periodic(cron="0 3 * * *", tz="Europe/Berlin")          # every night at 03:00 Berlin time
    @periodic(every=timedelta(seconds=30), kwargs={"region": "eu"}, name="poll-eu")
    @task()
    def poll(region: str = "us") -> None: ...

A schedule is a task, the arguments of each of its runs, and its ticks:
either a cron expression read in a time zone (`cron`, `tz`), or a fixed
interval anchored to the Unix epoch (`every`), so that every scheduler on
every host agrees on the ticks. Each tick is stored under an id made from
the schedule's name and the tick's time (`tick_id`), and ``enqueue`` is
idempotent on id, so any number of schedulers store each tick once: the
guarantee needs no lock and no leader (see docs/periodic.md).

Declaring checks everything a tick would need, and refuses a bad schedule
with `InvalidSchedule` naming the problem, registering nothing: a cron
expression `cronsim` cannot read (5 fields, or 6 with seconds first), an
unknown time zone, arguments that do not fit the task's signature or that
the codec cannot carry, a second schedule under a name already taken. The
name defaults to the task's path (``module:function``); a task with two
schedules must name at least one of them.

Cron semantics are `cronsim`'s (Debian cron's): a 5-field expression with a
fixed minute and hour (``30 2 * * *``) runs once a day through daylight-
saving changes (on a spring-forward night a 02:30 that does not exist runs
at the first minute after the gap, on a fall-back night the first 02:30
only); expressions with a ``*`` or a step in the minute or hour field, and
6-field ones, tick in real time (a fall-back night's repeated hour has its
ticks twice, as the clock says so).

A running task learns which schedule and tick it came from with `tick_of`.
The registry is per process, like the task registry: a worker keeps the
schedules of the modules it imported.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import zoneinfo
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import attrs
from cronsim import CronSim, CronSimError

from threadmill_core.clock import from_ms, to_ms
from threadmill_core.context import TaskContext
from threadmill_core.errors import ThreadmillError
from threadmill_core.models import MAX_WAIT, TaskResult
from threadmill_core.values import check_call

#: How far back a scheduler that has just started (or was stalled) looks for
#: ticks it has not stored yet, unless a schedule says otherwise (`catch_up`).
DEFAULT_CATCH_UP = timedelta(hours=1)
#: Of the missed ticks within the catch-up window, only this many of the
#: latest are stored; the older are skipped and logged: never a burst.
CATCH_UP_TICKS = 10
#: The shortest interval `every` takes.
MIN_EVERY = timedelta(seconds=1)

T = TypeVar("T")


class InvalidSchedule(ThreadmillError, ValueError):
    """A schedule that cannot be kept: a bad expression, time zone, arguments or name."""


@attrs.frozen(kw_only=True)
class Schedule:
    """One declared schedule: a task, its arguments, and when it ticks."""

    name: str
    #: The stored call every tick starts from (task path, queue, priority, retry policy).
    template: TaskResult = attrs.field(repr=False)
    cron: str | None = None
    every: timedelta | None = None
    #: The IANA time zone `cron` is read in ("UTC" for `every`).
    tz: str = "UTC"
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = attrs.field(factory=dict)
    #: False: a tick is skipped while an earlier tick's task is pending or running, and of
    #: the ticks due at once only the latest is stored (see `threadmill_core.worker.scheduling`).
    overlap: bool = True
    catch_up: timedelta = DEFAULT_CATCH_UP

    @property
    def task_path(self) -> str:
        return self.template.task_path

    @property
    def expression(self) -> str:
        """The cron expression, or ``every <seconds>s``."""
        if self.cron is not None:
            return self.cron
        assert self.every is not None
        return f"every {self.every.total_seconds():g}s"

    @property
    def zone(self) -> zoneinfo.ZoneInfo:
        return zoneinfo.ZoneInfo(self.tz)

    def next_tick(self, after: datetime) -> datetime:
        """The first tick strictly after `after` (aware), in UTC, whole milliseconds."""
        if self.every is not None:
            period = to_ms_delta(self.every)
            return from_ms((to_ms(after) // period + 1) * period)
        assert self.cron is not None
        for local in CronSim(self.cron, after.astimezone(self.zone)):
            tick = local.astimezone(UTC)
            # A wall-clock tick in a fall-back night's repeated hour reads as its
            # first occurrence, which may lie before `after`: already past.
            if tick > after:
                return tick
        raise InvalidSchedule(f"schedule {self.name!r}: {self.cron!r} has no tick after {after}")

    def previous_tick(self, before: datetime) -> datetime | None:
        """The last tick strictly before `before`, or None if none in cronsim's 50 years."""
        if self.every is not None:
            period = to_ms_delta(self.every)
            return from_ms((to_ms(before) - 1) // period * period)
        assert self.cron is not None
        try:
            for local in CronSim(self.cron, before.astimezone(self.zone), reverse=True):
                tick = local.astimezone(UTC)
                if tick < before:
                    return tick
        except StopIteration:  # pragma: no cover - cronsim gives up after 50 years
            return None
        return None  # pragma: no cover


def to_ms_delta(delta: timedelta) -> int:
    return delta // timedelta(milliseconds=1)


_lock = threading.Lock()
_schedules: dict[str, Schedule] = {}


def registered_schedules() -> dict[str, Schedule]:
    """A snapshot of every schedule declared in this process, by name."""
    with _lock:
        return dict(_schedules)


def unregister_schedule(name: str) -> Schedule | None:
    """Forget the schedule `name` in this process (for tests and integrations); it or None."""
    with _lock:
        _hashes.clear()
        return _schedules.pop(name, None)


def periodic(
    *,
    cron: str | None = None,
    tz: str | None = None,
    every: timedelta | None = None,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    name: str | None = None,
    overlap: bool = True,
    catch_up: timedelta = DEFAULT_CATCH_UP,
) -> Callable[[T], T]:
    """Declare a schedule of the task below: stack it on ``@task()``.

    Exactly one of `cron` (5 fields, ``minute hour day month weekday``, or
    6 with a seconds field first; read in `tz`, an IANA zone, default UTC)
    and `every` (a timedelta of at least a second and at most `MAX_WAIT`, a
    thousand years, in whole milliseconds; ticks at the epoch's multiples of
    it). `args` and `kwargs` are every
    run's arguments, checked against the task's signature now. `name`
    (default: the task's path) is the schedule's name for ``threadmill
    schedules`` and in tick ids: unique in the process. `overlap` False skips
    a tick while an earlier tick's task is pending or running (see docs/periodic.md). `catch_up`
    is how far back missed ticks are still stored (default one hour, at
    most `MAX_WAIT`; at most the `CATCH_UP_TICKS` latest of them). Anything wrong raises
    `InvalidSchedule` and nothing is registered. The task is returned as is.
    """

    def declare(made: T) -> T:
        add_schedule(
            made,
            cron=cron,
            tz=tz,
            every=every,
            args=args,
            kwargs=kwargs,
            name=name,
            overlap=overlap,
            catch_up=catch_up,
        )
        return made

    return declare


def add_schedule(
    made: object,
    *,
    cron: str | None = None,
    tz: str | None = None,
    every: timedelta | None = None,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    name: str | None = None,
    overlap: bool = True,
    catch_up: timedelta = DEFAULT_CATCH_UP,
) -> Schedule:
    """`periodic`'s work, for a task object (or an integration's wrapper of one): the schedule.

    `made` needs what `Broker.enqueue` needs of a task: a `template` record
    and a `call_check` (a `threadmill_core.Task` has both).
    """
    template = getattr(made, "template", None)
    if not isinstance(template, TaskResult):
        raise InvalidSchedule(f"@periodic goes on a task: stack it above @task(), got {made!r}")
    path = template.task_path
    label = repr(name) if name is not None else f"of {path}"
    schedule = Schedule(
        name=_name(name, path),
        template=template,
        cron=_cron(cron, every, label),
        every=_every(every, cron, label),
        tz=_zone(tz, every, label),
        args=_arguments(made, path, args, kwargs, label),
        kwargs=dict(kwargs or {}),
        overlap=_flag(overlap, label),
        catch_up=_catch_up(catch_up, label),
    )
    with _lock:
        known = _schedules.get(schedule.name)
        if known is not None and known != schedule:
            raise InvalidSchedule(
                f"two schedules are named {schedule.name!r} ({known.expression} and "
                f"{schedule.expression}): give each a name=, unique in the process"
            )
        _schedules[schedule.name] = schedule
        _hashes.clear()
    return schedule


def _name(name: object, path: str) -> str:
    if name is None:
        return path
    if not isinstance(name, str) or not name or len(name) > 200 or not name.isprintable():
        raise InvalidSchedule(
            f"a schedule's name is a non-empty printable str of at most 200 chars, got {name!r}"
        )
    return name


def _cron(cron: object, every: object, label: str) -> str | None:
    if (cron is None) == (every is None):
        raise InvalidSchedule(f"schedule {label}: give exactly one of cron= and every=")
    if cron is None:
        return None
    if not isinstance(cron, str):
        raise InvalidSchedule(f"schedule {label}: cron must be a str, got {cron!r}")
    if len(cron.split()) not in (5, 6):
        raise InvalidSchedule(
            f"schedule {label}: cron {cron!r} has {len(cron.split())} fields; it takes 5 "
            "(minute hour day month weekday), or 6 with seconds first"
        )
    try:
        next(CronSim(cron, datetime(2000, 1, 1, tzinfo=UTC)))
    except CronSimError as exc:
        raise InvalidSchedule(f"schedule {label}: bad cron expression {cron!r}: {exc}") from None
    except StopIteration:
        raise InvalidSchedule(f"schedule {label}: cron {cron!r} never ticks") from None
    return cron


def _every(every: object, cron: object, label: str) -> timedelta | None:
    if every is None:
        return None
    if (
        not isinstance(every, timedelta)
        or not MIN_EVERY <= every <= MAX_WAIT
        or every % timedelta(milliseconds=1)
    ):
        raise InvalidSchedule(
            f"schedule {label}: every must be a timedelta of at least {MIN_EVERY} and at most "
            f"{MAX_WAIT.days:,} days, in whole milliseconds, got {every!r}"
        )
    return every


def _zone(tz: object, every: object, label: str) -> str:
    if tz is None:
        return "UTC"
    if every is not None:
        raise InvalidSchedule(
            f"schedule {label}: tz= goes with cron=; every= ticks on the epoch, in no zone"
        )
    if not isinstance(tz, str):
        raise InvalidSchedule(f"schedule {label}: tz must be an IANA zone name, got {tz!r}")
    try:
        zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise InvalidSchedule(
            f"schedule {label}: unknown time zone {tz!r} (an IANA name, such as 'Europe/Berlin')"
        ) from None
    return tz


def _arguments(
    made: object, path: str, args: object, kwargs: object, label: str
) -> tuple[Any, ...]:
    call_args, call_kwargs = argument_shapes(args, kwargs, f"schedule {label}")
    try:
        check = getattr(made, "call_check", None)
        if check is not None:
            check.check(path, call_args, call_kwargs)
        check_call("schedule", call_args, call_kwargs)
    except (TypeError, ValueError) as exc:
        raise InvalidSchedule(f"schedule {label}: {exc}") from None
    return tuple(call_args)


def argument_shapes(args: object, kwargs: object, label: str) -> tuple[list[Any], dict[str, Any]]:
    """A schedule's `args` as a list and `kwargs` (None for none) as a dict, copied.

    `InvalidSchedule` starting with `label` if `args` is not a list or tuple (a
    str is not) or `kwargs` not a mapping: integrations that convert the
    arguments further (Django's normalisation) check their shapes here first.
    """
    if isinstance(args, str | bytes) or not isinstance(args, Sequence):
        raise InvalidSchedule(f"{label}: args must be a list or tuple, got {args!r}")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise InvalidSchedule(f"{label}: kwargs must be a dict, got {kwargs!r}")
    return list(args), dict(kwargs or {})


def _flag(overlap: object, label: str) -> bool:
    if not isinstance(overlap, bool):
        raise InvalidSchedule(f"schedule {label}: overlap must be True or False, got {overlap!r}")
    return overlap


def _catch_up(catch_up: object, label: str) -> timedelta:
    if not isinstance(catch_up, timedelta) or not timedelta(0) <= catch_up <= MAX_WAIT:
        raise InvalidSchedule(
            f"schedule {label}: catch_up must be a timedelta of zero or more, at most "
            f"{MAX_WAIT.days:,} days, got {catch_up!r}"
        )
    return catch_up


# --- tick ids --------------------------------------------------------------------------


def _name_bits(name: str) -> int:
    """62 bits of the name's SHA-256: the random part (``rand_b``) of its tick ids."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8]) & ((1 << 62) - 1)


def _uuid7(ms: int, counter: int, rand_b: int) -> str:
    value = (ms << 80) | (0x7 << 76) | (counter << 64) | (0b10 << 62) | rand_b
    hex_ = value.to_bytes(16).hex()
    return f"{hex_[:8]}-{hex_[8:12]}-{hex_[12:16]}-{hex_[16:20]}-{hex_[20:]}"


def tick_id(name: str, tick: datetime) -> str:
    """The id of schedule `name`'s tick at `tick`: the same on every host, every time.

    A UUIDv7 (so it sorts with the ids `threadmill_core.ids` makes): its
    48-bit time is the tick's Unix milliseconds, its 12-bit counter 0, its 62
    random bits the name's hash.
    """
    return _uuid7(to_ms(tick), 0, _name_bits(name))


def run_id(name: str, now: datetime) -> str:
    """A fresh id for a run of schedule `name` now, out of its ticks (``schedules run``).

    As `tick_id`, but the counter is random and never 0, so it is no tick's id.
    """
    return _uuid7(to_ms(now), 1 + secrets.randbelow(0xFFF), _name_bits(name))


@attrs.frozen
class Tick:
    """Where a task came from: its schedule's name and tick, or a run by hand (`manual`)."""

    schedule: str
    at: datetime
    manual: bool = False


_hashes: dict[int, str] = {}


def tick_of(source: TaskContext | TaskResult | Any) -> Tick | None:
    """The schedule and tick a task came from; None if not from a schedule declared here.

    `source` is the task's context (threadmill's `TaskContext`, or Django's,
    whose ``task_result`` is read) or its record. Read from the id (see
    `tick_id`): the schedule must be declared in this process, as it is in a
    worker that imported the schedule's module.
    """
    task_id: object
    if isinstance(source, TaskContext):
        task_id = source.record.id
    elif isinstance(source, TaskResult):
        task_id = source.id
    else:  # Django's TaskContext, or its TaskResult
        task_id = getattr(getattr(source, "task_result", source), "id", None)
    if not isinstance(task_id, str):
        return None
    try:
        value = int(task_id.replace("-", ""), 16)
    except ValueError:
        return None
    if value >> 76 & 0xF != 7 or value.bit_length() > 128:
        return None
    with _lock:
        if not _hashes:
            _hashes.update((_name_bits(name), name) for name in _schedules)
        name = _hashes.get(value & ((1 << 62) - 1))
    if name is None:
        return None
    return Tick(schedule=name, at=from_ms(value >> 80), manual=bool(value >> 64 & 0xFFF))
