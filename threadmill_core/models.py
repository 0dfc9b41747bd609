"""The protocol's data: task records, errors, leases and queue counts.

Names follow Django's task framework where the concept is the same
(`TaskResult`, `TaskResultStatus`, `TaskError`, `TaskContext`); the lease
is ours. Models are frozen; change one with `attrs.evolve`, which runs
their validators. The `validate_*` functions check options given by users
(a priority, a duration, a `run_after`) and raise `InvalidOption`.

Timestamps are aware UTC datetimes with millisecond resolution (see
`threadmill_core.clock`).
"""

from __future__ import annotations

import enum
import math
from datetime import datetime, timedelta
from typing import Any, TypeAlias

import attrs

from threadmill_core.display import short_repr
from threadmill_core.errors import InvalidOption

#: A value the codec carries unchanged: None, bool, int, float, str, and
#: lists and str-keyed dicts of these.
JSON: TypeAlias = Any

MIN_PRIORITY = -100
MAX_PRIORITY = 100
#: The longest ttl or delay a backend takes (`threadmill_core.checks`' `ttl_ms`,
#: `check_delay`, a retry delay in `check_decision`), and the longest relative
#: `run_after`: a thousand years, so that every deadline and due time it makes is a
#: `datetime` (before year 10000) until the year 8999. A longer one is refused
#: before anything changes; `threadmill_core.retry.decide` caps a policy's delay at
#: it. Importable from `threadmill_core.checks`, where it lived first.
MAX_WAIT = timedelta(days=365_000)
#: The longest `Progress.message`, in characters.
MAX_PROGRESS_MESSAGE = 1_000


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


def _unicode_text(value: str) -> str:
    """`value` with any lone surrogate (which no UTF-8 holds) written as its escape, ``\\udcff``.

    An exception's text may hold one: a file name that is not UTF-8, decoded with
    ``surrogateescape`` as `os.fsdecode` does. Stored as it is, the error could not be
    encoded, and the task's failure would never be recorded.
    """
    if type(value) is not str or value.isascii():
        return value  # most errors: nothing to look at (and a non-str is the codec's to refuse)
    try:
        value.encode()
    except UnicodeEncodeError:
        return value.encode(errors="backslashreplace").decode()
    return value


def _unicode_message(value: str | None) -> str | None:
    """`_unicode_text` for a text that may be None."""
    return value if value is None else _unicode_text(value)


@attrs.frozen(kw_only=True)
class TaskError:
    """One failure of a task: an exception it raised, or a lease that expired.

    Its text is valid Unicode: a lone surrogate in it (a file name that is not UTF-8,
    say) is kept as its escape, ``\\udcff``, so the error can always be stored.
    """

    #: Import path of the exception class, ``module.QualName``.
    exception_class_path: str = attrs.field(converter=_unicode_text)
    #: In the ``repr``, the message and the traceback are cut (`display.short_repr`).
    message: str = attrs.field(converter=_unicode_text, repr=short_repr)
    traceback: str = attrs.field(default="", converter=_unicode_text, repr=short_repr)

    @classmethod
    def from_exception(cls, exc: BaseException, traceback: str = "") -> TaskError:
        """The error of `exc`; an exception whose ``str()`` raises has the message
        ``<exception str() failed>``, as Python's own tracebacks show it."""
        kind = type(exc)
        try:
            message = str(exc)
        except Exception:  # the exception's own __str__ failed: still record the failure
            message = "<exception str() failed>"
        return cls(
            exception_class_path=f"{kind.__module__}.{kind.__qualname__}",
            message=message,
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


def _time_limit(_instance: object, _attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (not isinstance(value, timedelta) or value <= timedelta(0)):
        raise ValueError(f"time_limit must be None or a positive timedelta, got {value!r}")


def check_progress(done: object, total: object = None, message: object = None) -> None:
    """Raise `InvalidOption` (a `ValueError`) naming what is wrong with a progress report.

    `done` must be a finite int or float of zero or more (not a bool);
    `total` None, or a finite int or float above zero with `done` at most
    `total`; `message` None, or a str of at most `MAX_PROGRESS_MESSAGE` characters.
    """
    if not _finite(done) or done < 0:  # type: ignore[operator]
        raise InvalidOption(f"progress done must be a finite number of zero or more, got {done!r}")
    if total is not None:
        if not _finite(total) or total <= 0:  # type: ignore[operator]
            raise InvalidOption(
                f"progress total must be None or a finite number above zero, got {total!r}"
            )
        if done > total:  # type: ignore[operator]
            raise InvalidOption(f"progress done ({done!r}) is more than its total ({total!r})")
    if message is not None:
        if type(message) is not str:
            raise InvalidOption(
                f"progress message must be None or a str, got {short_repr(message)}"
            )
        if len(message) > MAX_PROGRESS_MESSAGE:
            raise InvalidOption(
                f"progress message is {len(message):,} characters long;"
                f" it may have at most {MAX_PROGRESS_MESSAGE:,}"
            )


def _finite(value: object) -> bool:
    """Whether `value` is an int or a float (not a bool) and finite."""
    return type(value) is int or (type(value) is float and math.isfinite(value))


def _progress(instance: Progress, _attribute: attrs.Attribute[Any], _value: Any) -> None:
    check_progress(instance.done, instance.total, instance.message)


@attrs.frozen(kw_only=True)
class Progress:
    """How far a running task says it got (`TaskContext.progress`), as last stored.

    Made through `check_progress`'s rules (an invalid one raises
    `InvalidOption`). `updated_at` is set by the backend, on its clock, when
    it stores the progress (`Backend.record_progress`); what a worker sends
    there is ignored.
    """

    done: int | float = attrs.field(validator=_progress)
    total: int | float | None = None
    #: A lone surrogate in it is kept as its escape, as in a `TaskError`'s text.
    message: str | None = attrs.field(default=None, converter=_unicode_message, repr=short_repr)
    updated_at: datetime | None = attrs.field(default=None, validator=_aware)


# Not slotted, unlike the other models: a frozen class with slots sets each of its
# fifteen fields through `object.__setattr__` when it is made, one without writes
# them to its `__dict__`, which costs much less. A record is made for every task
# enqueued, claimed and decided; its dict takes about a hundred bytes more. `evolved`
# relies on that dict.
@attrs.frozen(kw_only=True, slots=False)
class TaskResult:
    """The stored record of one task, from enqueue to its terminal state.

    Backends own `status`, the timestamps, `attempts` and `worker_ids`; the
    worker supplies `errors` and `return_value` when it acknowledges.
    """

    id: str
    #: Import path of the task function, ``module:qualname``.
    task_path: str
    #: In the ``repr``, the arguments and the return value are cut to a readable
    #: length (`display.short_repr`): one may be a megabyte.
    args: list[JSON] = attrs.field(factory=list, repr=short_repr)
    kwargs: dict[str, JSON] = attrs.field(factory=dict, repr=short_repr)
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
    return_value: JSON = attrs.field(default=None, repr=short_repr)
    retry: RetryPolicySpec | None = None
    #: Set at enqueue and never changed (retries and requeues keep them): small str-to-str
    #: metadata that is not an argument, such as the W3C trace context of
    #: `threadmill_core.tracing`. Bounded by `threadmill_core.headers`, and checked
    #: where the arguments are (at enqueue, and when stored bytes are read), not
    #: by the class: a record is made for every task claimed. Empty for a record
    #: stored without any.
    headers: dict[str, str] = attrs.field(factory=dict)
    #: Set at enqueue and never changed: how long one attempt may run before the
    #: worker stops it (`threadmill_core.errors.TimeLimitExceeded`); None: the
    #: task's or the worker's default. Millisecond resolution, rounded up, once stored.
    time_limit: timedelta | None = attrs.field(default=None, validator=_time_limit)
    #: The last progress stored for the task (`Backend.record_progress`); kept
    #: after it finishes and through retries, cleared by `requeue`. Backend-owned.
    progress: Progress | None = None
    #: When a cancel was requested for the task while it ran (`Backend.request_cancel`),
    #: on the backend's clock; kept on the final record, cleared by `requeue`.
    cancel_requested_at: datetime | None = attrs.field(default=None, validator=_aware)

    @property
    def is_finished(self) -> bool:
        return self.status.is_terminal


def evolved(record: TaskResult, **changes: Any) -> TaskResult:
    """``attrs.evolve(record, **changes)``, running the validators of `changes` only.

    `record`'s other fields were validated when it was made, and each of
    `TaskResult`'s validators looks at its own field alone, so checking the
    changed ones checks what `attrs.evolve` checks; an invalid change raises
    as it would. The copy skips the class's ``__init__`` (twenty-one keyword
    arguments, eight validators), which a record made for every task claimed,
    decided and enqueued in a batch pays otherwise: the copy's instance
    ``__dict__`` is `record`'s with `changes` merged in (`TaskResult` is not
    slotted), and `TaskResult` has no ``__attrs_post_init__``: an import-time
    check raises if `TaskResult` ever has what the copy would skip. A
    validator that read another field would break this too;
    tests/core/test_fast_paths.py pins that the copy equals `attrs.evolve`'s,
    invalid changes included.

    Fast path: one record copied per task claimed, decided and enqueued in a batch.
    """
    fields = record.__dict__ | changes
    if len(fields) != len(_FIELD_NAMES):
        unknown = ", ".join(repr(name) for name in changes if name not in _FIELD_NAMES)
        raise TypeError(f"TaskResult has no field {unknown}")
    copy: TaskResult = object.__new__(TaskResult)
    # The instance dict given whole; attrs documents object.__setattr__ for
    # setting attributes of a frozen instance.
    object.__setattr__(copy, "__dict__", fields)
    if not _VALIDATED.keys().isdisjoint(changes):
        for name, (field, validator) in _VALIDATED.items():  # in field order, as attrs
            if name in changes:
                validator(copy, field, changes[name])
    return copy


#: For `evolved`: the names of `TaskResult`'s fields, and each validated one's field
#: and validator.
_FIELD_NAMES = frozenset(attrs.fields_dict(TaskResult))
_VALIDATED = {
    field.name: (field, validator)
    for field in attrs.fields(TaskResult)
    if (validator := field.validator) is not None
}


def _check_evolved_skips_nothing() -> None:
    """Raise `AssertionError` (at import) if `TaskResult` has anything `evolved` would skip.

    `evolved` copies the instance dict and runs the changed fields'
    validators: a converter, an ``on_setattr`` hook, an ``__attrs_post_init__``,
    slots, or a field outside ``__init__`` would make its copy differ from
    `attrs.evolve`'s. Not an ``assert`` statement, so ``python -O`` checks it too.
    """
    problems = [
        f"{field.name}: {what}"
        for field in attrs.fields(TaskResult)
        for what, present in (
            ("a converter", field.converter is not None),
            ("on_setattr", field.on_setattr is not None),
            ("init=False", not field.init),
            ("an alias", field.alias != field.name),
        )
        if present
    ]
    if hasattr(TaskResult, "__attrs_post_init__"):
        problems.append("__attrs_post_init__")
    if "__slots__" in TaskResult.__dict__:
        problems.append("slots")
    if problems:
        raise AssertionError(f"models.evolved would skip TaskResult's {', '.join(problems)}")


_check_evolved_skips_nothing()


#: One call of a task, as `Backend.enqueue_calls` takes it: the new task's id, its
#: positional arguments (a list) and its keyword arguments (a dict).
TaskCall: TypeAlias = tuple[str, list[Any], dict[str, Any]]


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
    #: How many claims of the task expired with their start unrecorded and were given
    #: back (see `Backend.claim_expired`), as `claim` found it (a renewal from `extend`
    #: need not carry it); 0 on a reaper's lease. A worker records the start of a task
    #: with any (`Backend.mark_started`) before it runs it, so only a task that ran is
    #: ever charged for a worker's death.
    unstarted_expiries: int = 0
    #: True on a lease renewed by `Backend.extend` / `extend_many` when a cancel was
    #: requested for the task under this token (`Backend.request_cancel`): its holder
    #: should stop the task and `complete` it CANCELLED. Always False from `claim`.
    cancel_requested: bool = False

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
    SUCCESSFUL, FAILED or CANCELLED. Retries, promotions, give-backs of claimed
    tasks, purges and expiring results are neither.
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


def validate_run_after(run_after: object) -> datetime | timedelta | None:
    """Accept None, an aware datetime or a timedelta of zero to `MAX_WAIT`; else `InvalidOption`."""
    if run_after is None:
        return None
    if isinstance(run_after, datetime):
        if run_after.tzinfo is None or run_after.utcoffset() is None:
            raise InvalidOption(
                f"run_after must be an aware datetime (with a timezone), got naive {run_after!r}"
            )
        return run_after
    if isinstance(run_after, timedelta):
        if run_after > MAX_WAIT:
            raise InvalidOption(
                f"run_after must be at most {MAX_WAIT.days:,} days from now, got {run_after!r}"
            )
        return validate_timedelta("run_after", run_after, positive=False)
    raise InvalidOption(f"run_after must be an aware datetime or a timedelta, got {run_after!r}")


def call_record(template: TaskResult, call: TaskCall) -> TaskResult:
    """The record of one call (see `threadmill_core.backend.Backend.enqueue_calls`):
    `template`'s task with its id and arguments; every other field at its default, as
    `enqueue` reads none of them. Importable from `threadmill_core.backend` too.
    """
    task_id, args, kwargs = call
    return TaskResult(
        id=task_id,
        task_path=template.task_path,
        args=args,
        kwargs=kwargs,
        queue=template.queue,
        priority=template.priority,
        run_after=template.run_after,
        retry=template.retry,
        headers=template.headers,
        time_limit=template.time_limit,
    )
