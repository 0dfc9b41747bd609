"""The task API: ``@task``, `Task.using` and `Task.enqueue`.

::

    from threadmill_core import task, ExponentialBackoff

    @task(queue="emails", retry=ExponentialBackoff(max_retries=3))
    def send_welcome(user_id: int) -> None: ...

    send_welcome(42)                                # still a plain call
    send_welcome.enqueue(42)                        # stored; returns the TaskResult
    send_welcome.using(priority=10, run_after=timedelta(minutes=5)).enqueue(42)

A task is a module-level function (sync or ``async def``), named by its
import path ``module:qualname``. Decorating registers it in this process's
task registry; a worker runs only tasks registered by the modules it loaded.

A function whose first parameter is named ``context`` receives a
`TaskContext` there (the record, attempt number, lease token, and whether
the lease was lost); callers never pass it.

A call that does not fit the function's signature (a wrong number of
positional arguments, an unknown or repeated keyword, a missing required
argument) is refused at enqueue with `InvalidCall`, naming the task and the
mismatch, and nothing is stored: it could never run. The signature is read
once, when the task is made (`Task.signature`, without the context
parameter), and each shape of call is bound to it once (`Task.call_check`,
see `threadmill_core.calls`). Unknown options, to ``@task``, `Task.using`
or `register_task`, raise `InvalidOption` listing the valid ones.

Framework integrations (threadmill_django, and any later Flask or FastAPI
one) define tasks without ``@task``: `register_task` registers any callable
under a path of their choosing, such as a wrapper that prepares the
framework around the user's function, and `unregister_task` removes it.
The registry is per process; `registered_task` and `registered_tasks` read
it. See docs/integrations.md.
"""

from __future__ import annotations

import inspect
import math
import re
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Generic, Never, ParamSpec, TypeVar, overload

import attrs

from threadmill_core.broker import Broker, producer_broker
from threadmill_core.calls import CallCheck
from threadmill_core.checks import MAX_WAIT
from threadmill_core.errors import InvalidOption, InvalidTaskDefinition
from threadmill_core.models import (
    RetryPolicySpec,
    TaskResult,
    validate_priority,
    validate_run_after,
    validate_timedelta,
)
from threadmill_core.options import refuse_unknown
from threadmill_core.retry import RetryPolicy, policy_spec

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_QUEUE = "default"

_registry_lock = threading.Lock()
_registry: dict[str, Task[Any, Any]] = {}


def registered_task(path: str) -> Task[Any, Any] | None:
    """The task registered under `path` in this process, or None; no copy of the registry."""
    with _registry_lock:
        return _registry.get(path)


def registered_tasks() -> dict[str, Task[Any, Any]]:
    """A snapshot of every task registered in this process, by path."""
    with _registry_lock:
        return dict(_registry)


def register_task(
    func: Callable[..., Any],
    /,
    *,
    path: str | None = None,
    queue: str = DEFAULT_QUEUE,
    priority: int = 0,
    retry: RetryPolicy | None = None,
    lease_ttl: timedelta | float | None = None,
    time_limit: timedelta | float | None = None,
    takes_context: bool | None = None,
    signature: inspect.Signature | None = None,
    **unknown: Never,
) -> Task[Any, Any]:
    """Make `func` a task of this process, registered under `path`, and return it.

    This is ``@task`` for code that defines tasks some other way: a
    framework integration registers a wrapper around the user's function,
    under the user's function's path, and workers that load the
    integration run the wrapper. The options are ``@task``'s, validated the
    same way (`InvalidOption`), and `queue` and `priority` are only the
    defaults that `Task.using` changes.

    - `path` None: `func` must be a module-level function and the path is
      its ``module:qualname``, exactly as ``@task`` names it
      (`InvalidTaskDefinition` otherwise).
    - An explicit `path` must read ``module:qualname`` (dotted identifiers
      on both sides). `func` may then be any callable: a closure, a
      `functools.partial`, an object with ``__call__``. Nothing is ever
      imported from the path: a worker runs what is registered under it.
    - `takes_context` None: the task gets a `TaskContext` as its first
      argument when its first parameter is named ``context`` (as with
      ``@task``); True or False says so explicitly, for callables whose
      signature does not tell.
    - `signature` None: calls are bound, at enqueue, to `func`'s own
      signature (without the context parameter when the task takes one).
      A wrapper that takes ``*args, **kwargs`` gives the signature of the
      function it wraps (the user's arguments only, no context), so that a
      call the wrapped function would refuse is refused at enqueue.

    Registering a path that is already registered replaces the task (as
    importing a module again re-runs its decorators); the replaced `Task`
    object keeps working for enqueueing, since records name paths, not
    objects (its calls are still bound to its own signature). The registry
    is per process: every worker process must register its tasks itself,
    normally by importing the modules that do.
    """
    refuse_unknown("register_task", unknown, _REGISTER_OPTIONS)
    if signature is not None and not isinstance(signature, inspect.Signature):
        raise InvalidOption(f"signature must be an inspect.Signature or None, got {signature!r}")
    retry_spec = policy_spec(retry)
    wants_context = _wants_context(func) if takes_context is None else bool(takes_context)
    made: Task[Any, Any] = Task(
        func=func,
        path=_task_path(func) if path is None else validate_task_path(path),
        queue=validate_queue(queue),
        priority=validate_priority(priority),
        retry=retry,
        retry_spec=retry_spec,
        lease_ttl=validate_lease_ttl(lease_ttl),
        time_limit=validate_time_limit(time_limit),
        takes_context=wants_context,
        signature=call_signature(func, wants_context) if signature is None else signature,
    )
    with _registry_lock:
        _registry[made.path] = made
    return made


_REGISTER_OPTIONS = (
    "path",
    "queue",
    "priority",
    "retry",
    "lease_ttl",
    "time_limit",
    "takes_context",
    "signature",
)


def call_signature(func: Callable[..., Any], takes_context: bool) -> inspect.Signature | None:
    """The signature a call of `func` binds to at enqueue: the caller's arguments only.

    With `takes_context`, the first positional parameter (the one the
    worker fills with a `TaskContext`) is left out; a ``*args`` in its place
    takes the context and stays. None when `func` has no signature to read
    (some builtins): its calls are not checked. A task that takes a context
    but has no positional parameter for it is an `InvalidTaskDefinition`.
    """
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return None
    if not takes_context:
        return signature
    params = list(signature.parameters.values())
    if params and params[0].kind is inspect.Parameter.VAR_POSITIONAL:
        return signature
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if not params or params[0].kind not in positional:
        name = getattr(func, "__qualname__", repr(func))
        raise InvalidTaskDefinition(
            f"{name}{signature} takes a context, so its first parameter must be positional, "
            "to receive it"
        )
    return signature.replace(parameters=params[1:])


def unregister_task(path: str) -> Task[Any, Any] | None:
    """Remove the task registered under `path` from this process; return it, or None.

    A worker of this process then quarantines records naming the path, as
    it does any unknown path. For integrations that tear down what they
    registered (and for tests).
    """
    with _registry_lock:
        return _registry.pop(path, None)


def validate_time_limit(time_limit: object) -> timedelta | None:
    """None, or `time_limit` as a positive timedelta (a timedelta or seconds); else
    `InvalidOption` naming it (bool, str, zero, negative, not finite)."""
    if time_limit is None:
        return None
    if isinstance(time_limit, float) and not math.isfinite(time_limit):
        raise InvalidOption(f"time_limit must be a finite number of seconds, got {time_limit!r}")
    try:
        return validate_timedelta("time_limit", time_limit)
    except OverflowError:
        raise InvalidOption(f"time_limit is too large, got {time_limit!r}") from None


def validate_lease_ttl(lease_ttl: object) -> timedelta | None:
    """None, or `lease_ttl` as a positive timedelta (a timedelta or seconds) of at most
    `threadmill_core.checks.MAX_WAIT`, the longest a backend takes; else `InvalidOption`
    naming it (bool, str, zero, negative, not finite, too long)."""
    if lease_ttl is None:
        return None
    if isinstance(lease_ttl, float) and not math.isfinite(lease_ttl):
        raise InvalidOption(f"lease_ttl must be a finite number of seconds, got {lease_ttl!r}")
    try:
        delta = validate_timedelta("lease_ttl", lease_ttl)
    except OverflowError:
        delta = timedelta.max
    if delta > MAX_WAIT:
        raise InvalidOption(
            f"lease_ttl must be at most {MAX_WAIT.days:,} days (what a backend takes), "
            f"got {lease_ttl!r}"
        )
    return delta


def validate_queue(queue: object) -> str:
    """`queue` as a plain str; `InvalidOption` unless it is a non-empty printable str of at
    most 200 characters.

    A str subclass (a `StrEnum` member, say) is taken as its text: stored
    records hold exactly a str, so it is converted here, once, not refused
    at every enqueue.
    """
    if not isinstance(queue, str) or not queue or len(queue) > 200 or not queue.isprintable():
        raise InvalidOption(
            f"queue must be a non-empty printable str of at most 200 chars, got {queue!r}"
        )
    return str.__str__(queue)  # the text alone, whatever the class's own __str__ says


_IDENTIFIERS = re.compile(r"[^\W\d]\w*(\.[^\W\d]\w*)*")


def validate_task_path(path: object) -> str:
    """Return `path` (a plain str) if it reads ``module:qualname``; else `InvalidTaskDefinition`
    naming it."""
    if isinstance(path, str):
        module, colon, qualname = path.partition(":")
        if colon and _IDENTIFIERS.fullmatch(module) and _IDENTIFIERS.fullmatch(qualname):
            return str.__str__(path)  # a str subclass as its text, as `validate_queue` takes it
    raise InvalidTaskDefinition(
        f"a task path reads 'module:qualname' (dotted identifiers on both sides), got {path!r}"
    )


def _wants_context(func: Callable[..., Any]) -> bool:
    """Whether `func`'s first parameter is named ``context`` (False if it has no signature)."""
    try:
        params = list(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return False
    return bool(params) and params[0] == "context"


def _task_path(func: Callable[..., Any]) -> str:
    if not inspect.isfunction(func) and not inspect.iscoroutinefunction(func):
        raise InvalidTaskDefinition(f"@task decorates functions; got {func!r}")
    module = getattr(func, "__module__", None)
    qualname = func.__qualname__
    if func.__name__ == "<lambda>":
        raise InvalidTaskDefinition(
            f"@task cannot decorate a lambda ({module}:{qualname}): a worker finds tasks by "
            "import path, so define it with def at module level"
        )
    if "<locals>" in qualname or "." in qualname:
        raise InvalidTaskDefinition(
            f"@task needs a module-level function; {module}:{qualname} is nested, so a worker "
            "could not import it by its path"
        )
    if not module or module == "__main__":
        raise InvalidTaskDefinition(
            f"@task function {qualname} is defined in __main__, which a worker process cannot "
            "import; move it into a module and import it from there"
        )
    return f"{module}:{qualname}"


@attrs.frozen(kw_only=True, eq=False)
class Task(Generic[P, R]):
    """A function that can be enqueued, with its queue, priority and retry options.

    Calling a task calls the plain function. `using` returns a changed copy;
    `enqueue` stores a call for a worker and returns the stored `TaskResult`.
    """

    func: Callable[P, R]
    path: str
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    retry: RetryPolicy | None = None
    retry_spec: RetryPolicySpec | None = None
    lease_ttl: timedelta | None = None
    #: The longest one attempt may run (see `threadmill_core.worker.interrupts`); None:
    #: the worker's default, if any.
    time_limit: timedelta | None = None
    run_after: datetime | timedelta | None = None
    broker: Broker | None = None
    #: The function's first parameter is named ``context`` and takes a TaskContext.
    takes_context: bool = False
    #: What each call's arguments must bind to at enqueue (`call_signature`: no
    #: context parameter); None: calls are not checked. Read once, kept by `using`.
    signature: inspect.Signature | None = attrs.field(repr=False)
    #: Checks each call against `signature` at enqueue (None: not checked).
    call_check: CallCheck | None = attrs.field(init=False, repr=False)
    #: Whether `func` is a coroutine function, asked once (a worker asks per task).
    is_async: bool = attrs.field(init=False, repr=False)
    #: What every stored call of this task starts from (made, so checked, once):
    #: the broker copies it with each call's id and arguments.
    template: TaskResult = attrs.field(init=False, repr=False)

    @signature.default
    def _signature(self) -> inspect.Signature | None:
        return call_signature(self.func, self.takes_context)

    @call_check.default
    def _call_check(self) -> CallCheck | None:
        return None if self.signature is None else CallCheck(self.signature)

    @is_async.default
    def _is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.func)

    @template.default
    def _template(self) -> TaskResult:
        return TaskResult(
            id="",
            task_path=self.path,
            queue=self.queue,
            priority=self.priority,
            retry=self.retry_spec,
            time_limit=self.time_limit,
        )

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    def using(
        self,
        *,
        broker: Broker | None = None,
        queue: str | None = None,
        priority: int | None = None,
        run_after: datetime | timedelta | None = None,
        time_limit: timedelta | float | None = None,
        # Never: a type checker flags an unknown option; at run time it is an InvalidOption.
        **unknown: Never,
    ) -> Task[P, R]:
        """A copy with the given options changed; options left as None are kept.

        An unknown option raises `InvalidOption` listing the valid ones, and so
        does a bad value (a `broker` that is not a `Broker`, such as its URL).
        """
        refuse_unknown("using()", unknown, _USING_OPTIONS)
        changes: dict[str, Any] = {}
        if broker is not None:
            if not isinstance(broker, Broker):
                raise InvalidOption(
                    f"broker must be a threadmill_core.Broker (connect(url) makes one), "
                    f"got {broker!r}"
                )
            changes["broker"] = broker
        if queue is not None:
            changes["queue"] = validate_queue(queue)
        if priority is not None:
            changes["priority"] = validate_priority(priority)
        if run_after is not None:
            changes["run_after"] = validate_run_after(run_after)
        if time_limit is not None:
            changes["time_limit"] = validate_time_limit(time_limit)
        return attrs.evolve(self, **changes)

    def enqueue(self, /, *args: Any, **kwargs: Any) -> TaskResult:
        """Store a call of this task; returns the stored record (READY or DEFERRED).

        It goes to the broker given to `using`, else to the default broker
        (`threadmill_core.broker.producer_broker`: ``THREADMILL_URL``, the
        worker's own inside ``threadmill worker``, else ``memory://``, with a
        `MemoryBrokerWarning` once when no worker could see it).

        The arguments must fit the function's signature (`InvalidCall`
        otherwise, naming the task and the mismatch) and be values the codec
        carries (see `threadmill_core.codec`; `UnsupportedValue` otherwise,
        naming the argument). Either way nothing is stored.
        """
        return (self.broker or producer_broker()).enqueue(self, *args, **kwargs)


_TASK_OPTIONS = ("queue", "priority", "retry", "lease_ttl", "time_limit")
_USING_OPTIONS = ("broker", "queue", "priority", "run_after", "time_limit")


@overload
def task(func: Callable[P, R], /) -> Task[P, R]: ...
@overload
def task(
    *,
    queue: str = ...,
    priority: int = ...,
    retry: RetryPolicy | None = ...,
    lease_ttl: timedelta | float | None = ...,
    time_limit: timedelta | float | None = ...,
) -> Callable[[Callable[P, R]], Task[P, R]]: ...


def task(func: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """Make a module-level function a task: ``@task`` or ``@task(queue=..., ...)``.

    Options: `queue` (default ``"default"``), `priority` (-100..100, higher
    runs first), `retry` (a retry policy, see `threadmill_core.retry`) and
    `lease_ttl` (how long a worker may go without a heartbeat before the task
    is presumed abandoned; heartbeats renew it, so it does not bound the run
    time; a timedelta or seconds, at most `threadmill_core.checks.MAX_WAIT`)
    and `time_limit` (the longest one attempt may run, a timedelta or
    seconds: past it `threadmill_core.TimeLimitExceeded` is raised in the task,
    see `threadmill_core.worker.interrupts`; `Task.using` overrides it per call).
    Unknown options and bad values raise `InvalidOption`.
    """
    unknown = {name: value for name, value in options.items() if name not in _TASK_OPTIONS}
    refuse_unknown("task", unknown, _TASK_OPTIONS)
    # Checked here, so that a bad option fails at the decorator, not at the function.
    queue = validate_queue(options.get("queue", DEFAULT_QUEUE))
    priority = validate_priority(options.get("priority", 0))
    retry = options.get("retry")
    policy_spec(retry)
    lease_ttl = validate_lease_ttl(options.get("lease_ttl"))
    time_limit = validate_time_limit(options.get("time_limit"))

    def decorate(function: Callable[P, R]) -> Task[P, R]:
        made: Task[P, R] = register_task(
            function,
            queue=queue,
            priority=priority,
            retry=retry,
            lease_ttl=lease_ttl,
            time_limit=time_limit,
        )
        return made

    if func is not None:
        return decorate(func)
    return decorate
