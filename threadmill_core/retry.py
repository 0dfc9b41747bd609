"""Retry policies, and the one function that decides a failed attempt.

A retry policy is any callable taking a `TaskContext` and returning a
`timedelta` to wait before the next attempt, or None to give up. It must be
importable by its path (``module:qualname``) so the record can name it, and a
worker uses it only if it knows the path from the tasks it loaded.

A task that names no policy has `DEFAULT_RETRY`: an interrupted attempt
(its lease expired: the worker died, was stopped hard, or its
acknowledgement was lost in an outage) is retried, at most
`INTERRUPTION_RETRIES` times; the task's own exceptions are never retried.
A task that names a policy, `no_retry` included, leaves every decision to
it, interruptions too.

`decide` is the single place where a failure becomes a retry or a final
FAILED: the worker calls it for an exception raised by a task, the reaper for
an expired lease (with an `AcknowledgementTimeout` error). Sharing it is what
keeps the two paths from drifting apart.
"""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any, Never

import attrs

from threadmill_core.checks import MAX_WAIT
from threadmill_core.context import TaskContext
from threadmill_core.errors import (
    AcknowledgementTimeout,
    InvalidOption,
    ThreadmillError,
    UnsupportedValue,
)
from threadmill_core.models import Decision, Lease, RetryPolicySpec, TaskError, TaskResultStatus
from threadmill_core.options import refuse_unknown
from threadmill_core.values import check_retry

RetryPolicy = Callable[[TaskContext], timedelta | None]


#: The longest `ExponentialBackoff.max_delay`: half of `timedelta`'s range, so
#: a delay with the most jitter (twice the delay) is still a `timedelta`.
MAX_DELAY_SECONDS = timedelta(days=timedelta.max.days // 2).total_seconds()

_BACKOFF_OPTIONS = ("base_delay", "max_delay", "factor", "max_retries", "jitter", "retry_on")


def _seconds(name: str, value: object) -> float:
    """`value` (a timedelta, or seconds as an int or a float, not a bool) in seconds; else
    `InvalidOption` naming the option `name`."""
    try:
        if isinstance(value, timedelta):
            seconds = value.total_seconds()
        elif isinstance(value, int | float) and not isinstance(value, bool):
            seconds = float(value)
        else:
            raise InvalidOption(f"{name} must be a timedelta or seconds, got {value!r}")
    except OverflowError:  # an int past what a float holds
        seconds = math.inf
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidOption(f"{name} must be a finite duration of zero or more, got {value!r}")
    return seconds


def _number(value: object) -> float | None:
    """`value` as a float if it is an int or a float (not a bool) a float holds; else None."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def _exception_paths(values: object) -> tuple[str, ...]:
    if isinstance(values, str) or not isinstance(values, Iterable):
        raise InvalidOption(
            "retry_on takes a list or tuple of exception classes or their paths, "
            f"got {values!r}: write retry_on=({values!r},)"
        )
    return tuple(_exception_path(value) for value in values)


def _exception_path(value: type[BaseException] | str) -> str:
    if isinstance(value, str):
        if "." not in value:
            raise InvalidOption(f"retry_on names exceptions as 'module.Name', got {value!r}")
        return value
    if isinstance(value, type) and issubclass(value, BaseException):
        return f"{value.__module__}.{value.__qualname__}"
    raise InvalidOption(f"retry_on takes exception classes or their paths, got {value!r}")


def _loaded_class(path: str) -> type | None:
    """The class at `path` if its module is already imported; never imports anything.

    A stored error names its class by path; importing that path on the
    record's say-so would let whoever writes the store choose what to import.
    """
    module_name, _, qualname = path.rpartition(".")
    obj: Any = sys.modules.get(module_name)
    for part in qualname.split(".") if obj is not None else ():
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, type) else None


@attrs.frozen(kw_only=True, init=False)
class ExponentialBackoff:
    """Wait `base_delay * factor ** (attempt - 1)`, capped at `max_delay`, plus jitter.

    Gives up after `max_retries` retries (None: never). `jitter` adds a random
    fraction of the delay, up to `jitter` times it, so a burst of failures does
    not retry in lockstep. `retry_on` limits retries to these exception classes
    and their subclasses (by class or ``module.Name``); empty means every
    failure, expired leases included (`threadmill_core.errors.AcknowledgementTimeout`).

    The fields are plain data, so the policy is stored in the task record and
    survives a round trip through the codec. No attempt number overflows,
    whatever the base delay and factor: past what a float holds the delay is
    `max_delay`. `max_delay` is at most `MAX_DELAY_SECONDS` (about 1.4
    million years). `base_delay` and `max_delay` are a timedelta or seconds
    (an int or a float), `retry_on` a list or tuple. Bad values (a bool or a
    str for a number, a bare str or class for `retry_on`) and unknown
    options raise `InvalidOption` naming the option.
    """

    base_delay: float
    max_delay: float
    factor: float
    max_retries: int | None
    jitter: float
    retry_on: tuple[str, ...]

    # Written out, not attrs's, to refuse an unknown option as InvalidOption; the
    # defaults live here only.
    def __init__(
        self,
        *,
        base_delay: timedelta | float = 1.0,
        max_delay: timedelta | float = 3600.0,
        factor: float = 2.0,
        max_retries: int | None = 5,
        jitter: float = 0.1,
        retry_on: Iterable[type[BaseException] | str] = (),
        # Never: a type checker flags an unknown option; at run time it is an InvalidOption.
        **unknown: Never,
    ) -> None:
        refuse_unknown("ExponentialBackoff", unknown, _BACKOFF_OPTIONS)
        self.__attrs_init__(
            base_delay=_seconds("base_delay", base_delay),
            max_delay=_seconds("max_delay", max_delay),
            factor=factor,
            max_retries=max_retries,
            jitter=jitter,
            retry_on=_exception_paths(retry_on),
        )

    def __attrs_post_init__(self) -> None:
        factor = _number(self.factor)
        if factor is None or not math.isfinite(factor) or factor < 1:
            raise InvalidOption(f"factor must be a finite number of 1 or more, got {self.factor!r}")
        if self.max_retries is not None and (
            type(self.max_retries) is not int or self.max_retries < 0
        ):
            raise InvalidOption(
                f"max_retries must be None or an int >= 0, got {self.max_retries!r}"
            )
        jitter = _number(self.jitter)
        if jitter is None or not 0 <= jitter <= 1:
            raise InvalidOption(f"jitter must be between 0 and 1, got {self.jitter!r}")
        if self.max_delay > MAX_DELAY_SECONDS:
            raise InvalidOption(
                f"max_delay must be at most {MAX_DELAY_SECONDS:g} s (half of timedelta's "
                f"range, so a jittered delay is still a timedelta), got {self.max_delay:g} s"
            )
        if self.max_delay < self.base_delay:
            raise InvalidOption(
                f"max_delay ({self.max_delay:g} s) is shorter than "
                f"base_delay ({self.base_delay:g} s)"
            )

    def delay_for(self, attempt: int) -> float:
        """The delay in seconds before attempt `attempt + 1`, without jitter.

        Total for every attempt number and every valid policy: a growth that
        a float cannot hold is past `max_delay` (or, with a zero
        `base_delay`, irrelevant), so it gives `max_delay` (or 0), never an
        `OverflowError`.
        """
        if self.base_delay == 0 or self.factor == 1:
            return self.base_delay  # no growth to compute: 0 * inf would be nan
        try:
            # A float power, never an int one: an int factor raised to a huge
            # attempt number would build a huge int before it could overflow.
            growth = float(self.factor) ** max(attempt - 1, 0)
        except OverflowError:  # past any max_delay a float can hold
            return self.max_delay
        return min(self.base_delay * growth, self.max_delay)  # an inf product is capped too

    def retries(self, error: TaskError | None) -> bool:
        """Whether `retry_on` admits this error."""
        if not self.retry_on or error is None:
            return True
        if error.exception_class_path in self.retry_on:
            return True
        loaded = _loaded_class(error.exception_class_path)
        wanted = [_loaded_class(path) for path in self.retry_on]
        return loaded is not None and any(w is not None and issubclass(loaded, w) for w in wanted)

    def __call__(self, context: TaskContext) -> timedelta | None:
        if self.max_retries is not None and context.attempt > self.max_retries:
            return None
        if not self.retries(context.last_error):
            return None
        delay = self.delay_for(context.attempt)
        delay += delay * self.jitter * random.random()
        return timedelta(seconds=delay)


def no_retry(context: TaskContext) -> timedelta | None:
    """Every failure is final, an interruption too (unlike `DEFAULT_RETRY`)."""
    return None


#: How many times `DEFAULT_RETRY` retries a task whose attempts were interrupted.
INTERRUPTION_RETRIES = 3

#: The policy of a task that names none (guarantee 10): an attempt interrupted
#: by the infrastructure (an `AcknowledgementTimeout`: a lease that expired, a
#: task abandoned at a hard stop, an acknowledgement lost in an outage) is
#: retried after 1, 2 and 4 s (plus up to a tenth), until attempt
#: `INTERRUPTION_RETRIES` + 1; then, and on any exception the task raised
#: itself, the task is FAILED. The bound counts attempts, which a requeue keeps.
#: It is a plain `ExponentialBackoff`, so a task can name the same policy, or
#: widen its `retry_on`, explicitly.
DEFAULT_RETRY = ExponentialBackoff(
    base_delay=1,
    max_delay=60,
    max_retries=INTERRUPTION_RETRIES,
    retry_on=(AcknowledgementTimeout,),
)


# --- storing and finding policies ------------------------------------------------------

#: Policies a worker may use: builtin ones plus every policy named by a task it
#: loaded (`threadmill_core.task` registers them). Keyed by import path.
_KNOWN_POLICIES: dict[str, Callable[..., Any]] = {}


def _path_of(obj: object) -> str:
    return f"{obj.__module__}:{obj.__qualname__}"  # type: ignore[attr-defined]


def policy_spec(policy: RetryPolicy | None) -> RetryPolicySpec | None:
    """How `policy` is stored in a record; also makes the policy known to this process.

    A policy is either an attrs class instance (stored as its class path and
    fields, which must be values the codec carries, a tuple stored as a list:
    `InvalidOption` otherwise) or a module-level function (stored as its path).
    """
    if policy is None:
        return None
    if attrs.has(type(policy)):
        kind = type(policy)
        options = attrs.asdict(policy, recurse=False)  # type: ignore[arg-type]
        spec = _with_lists(RetryPolicySpec(path=_path_of(kind), options=options))
        try:
            check_retry(spec)
        except UnsupportedValue as exc:
            raise InvalidOption(
                f"retry policy {policy!r} is stored with each task by its fields, and {exc}"
            ) from None
        _KNOWN_POLICIES[spec.path] = kind
        return spec
    qualname = getattr(policy, "__qualname__", "")
    if not callable(policy) or not qualname or "<" in qualname or "." in qualname:
        raise InvalidOption(
            f"retry policy {policy!r} must be a module-level function or an attrs class "
            "instance (such as ExponentialBackoff), so a worker can find it by its path"
        )
    spec = RetryPolicySpec(path=_path_of(policy))
    _KNOWN_POLICIES[spec.path] = policy
    return spec


def _with_lists(spec: RetryPolicySpec) -> RetryPolicySpec:
    # The codec carries lists, not tuples: store tuple fields as lists so the
    # spec is the same before and after a round trip through storage.
    options = {
        key: list(value) if isinstance(value, tuple) else value
        for key, value in (spec.options or {}).items()
    }
    return attrs.evolve(spec, options=options)


class UnknownRetryPolicy(ThreadmillError, LookupError):
    """A stored policy path this process does not know (quarantine the task)."""


def resolve_policy(spec: RetryPolicySpec | None) -> RetryPolicy:
    """The policy a stored spec names, if this process registered it; else `UnknownRetryPolicy`.

    No spec (a task that named no policy) is `DEFAULT_RETRY`.
    """
    if spec is None:
        return DEFAULT_RETRY
    known = _KNOWN_POLICIES.get(spec.path)
    if known is None:
        raise UnknownRetryPolicy(
            f"retry policy {spec.path} is not used by any task this worker loaded; "
            "it is not imported on a stored record's say-so"
        )
    if spec.options is None:
        return known
    options: Mapping[str, Any] = spec.options
    try:
        return known(**options)  # type: ignore[no-any-return]
    except (TypeError, ValueError) as exc:
        raise UnknownRetryPolicy(
            f"retry policy {spec.path} rejects its stored options: {exc}"
        ) from exc


_KNOWN_POLICIES[_path_of(ExponentialBackoff)] = ExponentialBackoff
_KNOWN_POLICIES[_path_of(no_retry)] = no_retry


# --- the decision ------------------------------------------------------------------------


def decide(lease: Lease, error: TaskError, policy: RetryPolicy | None = None) -> Decision:
    """Turn one failure of the leased task into a retry or a final FAILED.

    Appends `error` to the record's errors, then asks `policy` (by default the
    one the record names, resolved with `resolve_policy`). A policy that
    cannot be resolved, or that raises, makes the failure final and adds an
    error saying why, so a broken policy never keeps a task cycling. A delay
    longer than `threadmill_core.checks.MAX_WAIT` (a thousand years) is that.
    """
    record = lease.record
    errors = (*record.errors, error)
    context = TaskContext(record=record, attempt=record.attempts, last_error=error)
    try:
        chosen = policy if policy is not None else resolve_policy(record.retry)
        delay = chosen(context)
        if delay is not None and (not isinstance(delay, timedelta) or delay < timedelta(0)):
            raise TypeError(f"a retry policy returns a timedelta >= 0 or None, got {delay!r}")
        if delay is not None:
            delay = min(delay, MAX_WAIT)  # what a backend takes: a thousand years
    except Exception as exc:
        errors = (*errors, TaskError.from_exception(exc))
        delay = None
    if delay is None:
        final = attrs.evolve(record, status=TaskResultStatus.FAILED, errors=errors)
        return Decision(lease=lease, record=final)
    return Decision(lease=lease, record=attrs.evolve(record, errors=errors), retry_delay=delay)
