"""The protocol's data: task records, errors, leases and queue counts.

Names follow Django's task framework where the concept is the same
(`TaskResult`, `TaskResultStatus`, `TaskError`, `TaskContext`); the lease
is ours. Models are frozen; change one with `attrs.evolve` (or, on a hot
path and with values already known to be valid, `evolve_unchecked`).

Timestamps are aware UTC datetimes with millisecond resolution (see
`threadmill_core.clock`).
"""

from __future__ import annotations

import enum
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeAlias, TypeVar

import attrs

from threadmill_core.errors import InvalidOption

#: A value the codec carries unchanged: None, bool, int, float, str, and
#: lists and str-keyed dicts of these.
JSON: TypeAlias = Any

MIN_PRIORITY = -100
MAX_PRIORITY = 100


class TaskResultStatus(enum.Enum):
    """Where a task is in its life. The first three are pending, the last three terminal."""

    READY = "READY"
    DEFERRED = "DEFERRED"
    RUNNING = "RUNNING"
    SUCCESSFUL = "SUCCESSFUL"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES = frozenset(
    {TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED, TaskResultStatus.CANCELLED}
)
PENDING_STATUSES = frozenset(
    {TaskResultStatus.READY, TaskResultStatus.DEFERRED, TaskResultStatus.RUNNING}
)


def _aware(_instance: object, attribute: attrs.Attribute[Any], value: datetime | None) -> None:
    if value is not None and value.tzinfo is None:
        raise ValueError(f"{attribute.name} must be an aware datetime, got naive {value!r}")


def _priority(_instance: object, _attribute: attrs.Attribute[Any], value: int) -> None:
    validate_priority(value)


@attrs.frozen(kw_only=True)
class TaskError:
    """One failure of a task: an exception it raised, or a lease that expired."""

    #: Import path of the exception class, ``module.QualName``.
    exception_class_path: str
    message: str
    traceback: str = ""

    @classmethod
    def from_exception(cls, exc: BaseException, traceback: str = "") -> TaskError:
        kind = type(exc)
        return cls(
            exception_class_path=f"{kind.__module__}.{kind.__qualname__}",
            message=str(exc),
            traceback=traceback,
        )


@attrs.frozen(kw_only=True)
class RetryPolicySpec:
    """How a retry policy is stored in a record: its import path and its options.

    `path` is ``module:qualname``. `options` is None for a plain function and
    the policy's own fields for a policy object (see `threadmill_core.retry`).
    A worker only uses a policy whose path it knows from the tasks it loaded;
    it never imports one on a stored record's say-so.
    """

    path: str
    options: dict[str, JSON] | None = None


@attrs.frozen(kw_only=True)
class TaskResult:
    """The stored record of one task, from enqueue to its terminal state.

    Backends own `status`, the timestamps, `attempts` and `worker_ids`; the
    worker supplies `errors` and `return_value` when it acknowledges.
    """

    id: str
    #: Import path of the task function, ``module:qualname``.
    task_path: str
    args: list[JSON] = attrs.field(factory=list)
    kwargs: dict[str, JSON] = attrs.field(factory=dict)
    queue: str = "default"
    priority: int = attrs.field(default=0, validator=_priority)
    status: TaskResultStatus = TaskResultStatus.READY
    enqueued_at: datetime | None = attrs.field(default=None, validator=_aware)
    run_after: datetime | None = attrs.field(default=None, validator=_aware)
    started_at: datetime | None = attrs.field(default=None, validator=_aware)
    last_attempted_at: datetime | None = attrs.field(default=None, validator=_aware)
    finished_at: datetime | None = attrs.field(default=None, validator=_aware)
    #: Claims by workers. A reaper's claim is not an attempt.
    attempts: int = 0
    #: Every failure in order, including expired leases (`AcknowledgementTimeout`).
    errors: tuple[TaskError, ...] = ()
    #: The worker of each attempt, in order.
    worker_ids: tuple[str, ...] = ()
    return_value: JSON = None
    retry: RetryPolicySpec | None = None

    @property
    def is_finished(self) -> bool:
        return self.status.is_terminal


@attrs.frozen(kw_only=True)
class Lease:
    """A claim on a RUNNING task, valid while `token` is the task's current token.

    Workers get one from `Backend.claim`, the reaper from `Backend.claim_expired`.
    Every state change made with a lease is refused once another claim has
    replaced its token (fencing).
    """

    token: str
    deadline: datetime = attrs.field(validator=_aware)
    record: TaskResult

    @property
    def task_id(self) -> str:
        return self.record.id


@attrs.frozen(kw_only=True)
class Decision:
    """A lease holder's verdict on one task, for `Backend.decide_many`.

    With `retry_delay` None the task is finalized with `record.status`
    (as by `Backend.complete`); otherwise it is sent back (as by
    `Backend.retry`) with that delay.
    """

    lease: Lease
    record: TaskResult
    retry_delay: timedelta | None = None


@attrs.frozen(kw_only=True)
class QueueCounts:
    """How many tasks one queue holds in each segment."""

    queue: str
    ready: int = 0
    deferred: int = 0
    running: int = 0
    successful: int = 0
    failed: int = 0
    cancelled: int = 0

    @property
    def pending(self) -> int:
        return self.ready + self.deferred + self.running

    def of(self, status: TaskResultStatus) -> int:
        """The count for one status."""
        return int(getattr(self, status.value.lower()))


def _positive(_instance: object, attribute: attrs.Attribute[Any], value: timedelta) -> None:
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise ValueError(f"{attribute.name} must be a positive timedelta, got {value!r}")


@attrs.frozen(kw_only=True)
class QueueRates:
    """How many tasks entered and left one queue over a recent window (see `Backend.rates`).

    `window` is the span the counts cover: the one asked for, or less when
    the backend's history is shorter. `entered` counts tasks stored by
    `enqueue` or sent back by `requeue`; `finished` counts tasks that reached
    SUCCESSFUL, FAILED or CANCELLED. Retries, promotions, purges and expiring
    results are neither.
    """

    queue: str
    window: timedelta = attrs.field(validator=_positive)
    entered: int = 0
    finished: int = 0

    @property
    def ingress(self) -> float:
        """Tasks entering per second over `window`."""
        return self.entered / self.window.total_seconds()

    @property
    def egress(self) -> float:
        """Tasks finishing per second over `window`."""
        return self.finished / self.window.total_seconds()


class _Flag:
    """A bool that one thread sets and others read (an attribute write is atomic)."""

    __slots__ = ("up",)

    def __init__(self) -> None:
        self.up = False


@attrs.frozen(kw_only=True)
class TaskContext:
    """What a running task, and a retry policy, may know about the attempt.

    A task asks for it by declaring a first parameter named ``context``
    (see `threadmill_core.task`). `token` lets task code fence its own writes
    downstream: a write tagged with an older token is from a superseded attempt.
    """

    record: TaskResult
    #: 1 for the first claim, 2 for the second, ...
    attempt: int
    #: The failure being decided, for a retry policy; None while the task runs.
    last_error: TaskError | None = None
    token: str | None = None
    #: Set by `mark_lease_lost`. A plain flag, not a `threading.Event`: one
    #: context is made per task run, and an Event costs a lock and a condition.
    _lease_lost: _Flag = attrs.field(factory=_Flag, init=False, eq=False, repr=False)

    @property
    def lease_lost(self) -> bool:
        """True once the worker learned that this attempt's lease was taken away.

        The task's outcome will not be written; a long task may check this and stop early.
        """
        return self._lease_lost.up

    def mark_lease_lost(self) -> None:
        """Called by the worker when a heartbeat is refused; never by task code."""
        self._lease_lost.up = True


_T = TypeVar("_T")


#: `copier`'s functions, one per class and set of changed fields, made on first use.
_copiers: dict[tuple[type[Any], tuple[str, ...]], Callable[[Any, Mapping[str, Any]], Any]] = {}


def _store(cls: type[Any], name: str) -> Callable[[Any, Any], None]:
    """How `copier` and `maker` set field `name` on a new instance of `cls`.

    A slotted class has a member descriptor per field, whose ``__set__``
    skips a frozen class's ``__setattr__``; any other falls back to
    ``object.__setattr__``.
    """
    slot = next((c.__dict__[name] for c in cls.__mro__ if name in c.__dict__), None)
    store: Callable[[Any, Any], None] | None = getattr(slot, "__set__", None)
    return store or _setter(name)


def _setter(name: str) -> Callable[[Any, Any], None]:
    def store(instance: Any, value: Any) -> None:
        object.__setattr__(instance, name, value)

    return store


def copier(cls: type[_T], changed: Iterable[str]) -> Callable[[_T, Mapping[str, Any]], _T]:
    """A function ``copy(instance, changes)`` for `evolve_unchecked_with`, made once per loop.

    `changes` must hold exactly the fields named in `changed` (a field it
    lacks raises `KeyError`, one it adds is ignored). The function is
    generated like attrs' own ``__init__``: one line per field, no loop, no
    test of which fields changed, no validators (see `evolve_unchecked`).
    Each field is stored through its slot's own descriptor, which skips the
    frozen class's ``__setattr__``. A name that is not a field raises
    `TypeError`, as `attrs.evolve` does.
    """
    key = (cls, tuple(changed))
    copy = _copiers.get(key)
    if copy is not None:
        return copy
    names = [field.name for field in attrs.fields(cls)]  # type: ignore[arg-type]  # any attrs class
    unknown = sorted(set(key[1]) - set(names))
    if unknown:
        raise TypeError(f"{cls.__name__} has no field(s) {', '.join(unknown)}")
    scope: dict[str, Any] = {"object_new": object.__new__, "cls": cls}
    lines = ["def copy(instance, changes):", "    new = object_new(cls)"]
    for n, name in enumerate(names):
        scope[f"set_{n}"] = _store(cls, name)
        value = f"changes[{name!r}]" if name in key[1] else f"instance.{name}"
        lines.append(f"    set_{n}(new, {value})")
    lines.append("    return new")
    exec("\n".join(lines), scope)  # the code is built from the class's own field names
    made: Callable[[_T, Mapping[str, Any]], _T] = scope["copy"]
    _copiers[key] = made
    return made


def maker(cls: type[_T]) -> Callable[..., _T]:
    """A function ``make(**fields)`` that makes an instance of `cls` from every field, unchecked.

    Each field is a required keyword, so a field added to the class, or one
    misspelt, fails at once. As `copier`, without validators and storing
    each field through its slot's descriptor: for values read back from a
    backend's own store, where it is about a third less work than the class.
    """
    names = [field.name for field in attrs.fields(cls)]  # type: ignore[arg-type]  # any attrs class
    scope: dict[str, Any] = {"object_new": object.__new__, "cls": cls}
    lines = [f"def make(*, {', '.join(names)}):", "    new = object_new(cls)"]
    for n, name in enumerate(names):
        scope[f"set_{n}"] = _store(cls, name)
        lines.append(f"    set_{n}(new, {name})")
    lines.append("    return new")
    exec("\n".join(lines), scope)  # the code is built from the class's own field names
    made: Callable[..., _T] = scope["make"]
    return made


#: A call's record, unchecked: ``copy_call(shared, {"id": ..., "args": ..., "kwargs": ...})``
#: is `shared` (what every call of a task starts from) with one call's id and arguments.
copy_call = copier(TaskResult, ("id", "args", "kwargs"))


def evolve_unchecked(instance: _T, **changes: Any) -> _T:
    """`attrs.evolve` for the protocol's frozen models, without running validators.

    For the hot paths of the worker and backends, with values already known
    to be valid: read back from the backend's own store, or copied from a
    record that was validated when made. About twice as fast as
    `attrs.evolve`, which matters a few times per task. Anything built from
    a caller's input must go through the class (or `attrs.evolve`), so that
    bad input is refused where it enters.
    """
    return evolve_unchecked_with(instance, changes)


def evolve_unchecked_with(instance: _T, changes: Mapping[str, Any]) -> _T:
    """`evolve_unchecked` with the changes in a mapping, which a loop can make once.

    A loop copying many records with the same fields changed can take the
    copying function once from `copier` instead.
    """
    copy = _copiers.get((type(instance), tuple(changes))) or copier(type(instance), changes)
    copied: _T = copy(instance, changes)
    return copied


# --- task ids --------------------------------------------------------------------------

_id_lock = threading.Lock()
_last_ms = 0
_counter = 0
#: Random bytes read from the OS ahead, 9 per id (8 for its random bits, one to
#: start the counter at in a new millisecond): one read per this many ids, not
#: per id, nor per millisecond.
_RANDOM_IDS = 256
_ID_BYTES = 9
_random = b""
_random_at = 0
#: The 62 random bits of an id (``rand_b``).
_RAND_B = (1 << 62) - 1


def _forget_random() -> None:
    """In a forked child: the parent's unread random bytes must not make the child's ids."""
    global _random, _random_at
    _random, _random_at = b"", 0


os.register_at_fork(after_in_child=_forget_random)


def _take(count: int) -> bytes:
    """`count` random bytes, from those read ahead; call it holding `_id_lock`."""
    global _random, _random_at
    at = _random_at
    if at + count > len(_random):
        if count > _ID_BYTES * _RANDOM_IDS:
            return os.urandom(count)
        _random, at = os.urandom(_ID_BYTES * _RANDOM_IDS), 0
    _random_at = at + count
    return _random[at : at + count]


def _advance(now: int, ms: int, counter: int, seed: int) -> tuple[int, int]:
    """The millisecond and counter of the next id, after one made at `ms` and `counter`.

    A new millisecond starts the counter at `seed`, a random byte.
    """
    if now > ms:
        return now, seed
    if counter + 1 >= 1 << 12:  # the counter is full: borrow the next millisecond
        return ms + 1, 0
    return ms, counter + 1


def _version_bits(ms: int, counter: int) -> int:
    """An id's 128 bits but its 62 random ones: time, version 7, counter, variant."""
    return (ms << 80) | (0x7 << 76) | (counter << 64) | (0b10 << 62)


def _uuid_text(value: int) -> str:
    hex_ = value.to_bytes(16).hex()
    return f"{hex_[:8]}-{hex_[8:12]}-{hex_[12:16]}-{hex_[16:20]}-{hex_[20:]}"


def new_task_id() -> str:
    """A UUIDv7 string: 48 bits of Unix milliseconds, then a counter, then random bits.

    Ids made by one process are strictly increasing, also within one millisecond
    (the 12-bit ``rand_a`` field counts from a random start, and the millisecond
    is borrowed forward if it overflows), so sorting ids sorts tasks by
    creation. The 62 random bits and the counter's start come from
    `os.urandom`, read for many ids at once.
    """
    global _last_ms, _counter
    with _id_lock:
        block = _take(_ID_BYTES)
        _last_ms, _counter = _advance(time.time_ns() // 1_000_000, _last_ms, _counter, block[8])
        ms, counter = _last_ms, _counter
    random = int.from_bytes(block[:8])
    return _uuid_text(_version_bits(ms, counter) | (random & _RAND_B))


def new_task_ids(count: int) -> list[str]:
    """`count` ids, as `count` calls of `new_task_id` would make them, for much less time.

    The clock is read and the lock taken once, and the random bits of every
    id are read from the OS in one call (or from what `new_task_id` read
    ahead). After the first id, each counts one up, so the ids' time and
    counter fields follow from the first's; their text is made in runs
    that share a millisecond, from the random bytes' hex read once.
    """
    global _last_ms, _counter
    if count <= 1:  # one id costs less the plain way
        return [new_task_id()] if count == 1 else []
    with _id_lock:
        block = _take(8 * count + 1)  # the last byte starts the counter in a new millisecond
        ms, counter = _advance(time.time_ns() // 1_000_000, _last_ms, _counter, block[-1])
        # Id k is `counter + k` counts after (ms, 0): the counter's 12 bits, with
        # every overflow borrowing the next millisecond (see `_advance`).
        last = counter + count - 1
        _last_ms, _counter = ms + (last >> 12), last & 0xFFF
    random = bytearray(block[:-1])
    random[0::8] = random[0::8].translate(_VARIANT_BYTE)  # the top byte of each id's 64 bits
    tails = random.hex()
    ids: list[str] = []
    made = 0
    while made < count:
        run = min(count - made, 4096 - counter)  # ids left in this millisecond
        stamp = f"{ms:012x}"
        head = f"{stamp[:8]}-{stamp[8:]}-7"
        counters = range(3 * counter, 3 * (counter + run), 3)  # where each is in _COUNTERS
        starts = range(16 * made, 16 * (made + run), 16)  # where each id's bits are in tails
        ids += [
            f"{head}{_COUNTERS[c : c + 3]}-{tails[at : at + 4]}-{tails[at + 4 : at + 16]}"
            for c, at in zip(counters, starts, strict=True)
        ]
        made += run
        ms, counter = ms + 1, 0
    return ids


#: Each value of a byte with its top two bits set to the variant, 0b10.
_VARIANT_BYTE = bytes((byte & 0x3F) | 0x80 for byte in range(256))
#: The counter's 4,096 values as 3-digit hex, one after another.
_COUNTERS = "".join(f"{counter:03x}" for counter in range(1 << 12))


def validate_priority(priority: object) -> int:
    """Return `priority` if it is an int in range, else raise `InvalidOption` naming it."""
    if type(priority) is not int or not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise InvalidOption(
            f"priority must be an int from {MIN_PRIORITY} to {MAX_PRIORITY}, got {priority!r}"
        )
    return priority


def validate_timedelta(name: str, value: object, *, positive: bool = True) -> timedelta:
    """Accept a timedelta or a number of seconds; refuse negatives (and zero if `positive`)."""
    if isinstance(value, bool) or not isinstance(value, timedelta | int | float):
        raise InvalidOption(f"{name} must be a timedelta or seconds, got {value!r}")
    delta = value if isinstance(value, timedelta) else timedelta(seconds=value)
    if delta < timedelta(0) or (positive and delta == timedelta(0)):
        sign = "positive" if positive else "zero or more"
        raise InvalidOption(f"{name} must be {sign}, got {value!r}")
    return delta
