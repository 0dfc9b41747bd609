"""Exceptions raised by threadmill.

Every exception derives from `ThreadmillError`, and also from the nearest
builtin where one fits, so callers can catch either. Exceptions carry their
facts as attributes; the message is built from them.

A lost lease is *not* an exception: on the storage interface it is a `None`
return value, because it is normal life in a distributed queue.
"""

from __future__ import annotations

from collections.abc import Iterable

from threadmill_core.urls import redact


class ThreadmillError(Exception):
    """The root of every error threadmill raises."""


class TaskNotFound(ThreadmillError, LookupError):
    """No task with this id exists (never enqueued, purged, or expired after `result_ttl`)."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(f"no task with id {task_id!r} (unknown, purged, or its result expired)")


class UnsupportedValue(ThreadmillError, TypeError):
    """A task argument or return value that the codec cannot carry unchanged.

    `path` names where the value sits, e.g. ``kwargs['when']`` or ``args[0][2]``.
    """

    def __init__(self, path: str, value: object, reason: str | None = None) -> None:
        self.path = path
        self.value = value
        kind = f"{type(value).__module__}.{type(value).__qualname__}"
        self.reason = reason or (
            f"is a {kind}; threadmill carries only None, bool, int, float, str, "
            "list and dict with str keys, so that what is enqueued is what the function receives"
        )
        super().__init__(f"{path} {self.reason}")


class InvalidTaskDefinition(ThreadmillError, TypeError):
    """`@task` was applied to something a worker could not import by its path."""


class InvalidCall(ThreadmillError, TypeError):
    """A call whose arguments do not fit the task function's signature, refused at enqueue.

    A wrong number of positional arguments, an unknown keyword, a missing
    required argument, a keyword also given by position: what calling the
    function itself would refuse with `TypeError`, which this also is, so
    ``except TypeError`` around an enqueue still catches it. `task_path`
    names the task, `signature` is the one the call was bound to (the
    caller's arguments only, as text), `reason` the mismatch in `inspect`'s
    words (``missing a required argument: 'user_id'``), and `index` the
    call's place in a batch (`Broker.enqueue_many`), or None for a single
    enqueue. Nothing of the call, or of its batch, is stored.
    """

    def __init__(
        self, task_path: str, signature: str, reason: str, index: int | None = None
    ) -> None:
        self.task_path = task_path
        self.signature = signature
        self.reason = reason
        self.index = index
        which = "a call" if index is None else f"call {index} of the batch"
        super().__init__(f"{which} of task {task_path}{signature} does not fit: {reason}")


class PayloadTooLarge(ThreadmillError, ValueError):
    """A call whose arguments encode to more than the broker's ``max_payload_bytes``.

    Refused at enqueue, before anything is stored (for `Broker.enqueue_many`,
    none of the batch is). `size` is the call's arguments in bytes as the
    codec writes them (``[args, kwargs]`` as UTF-8 JSON), `limit` the
    broker's `max_payload_bytes`, `task_path` the task, and `index` the
    call's place in a batch, or None for a single enqueue.
    """

    def __init__(self, task_path: str, size: int, limit: int, index: int | None = None) -> None:
        self.task_path = task_path
        self.size = size
        self.limit = limit
        self.index = index
        which = "a call" if index is None else f"call {index} of the batch"
        super().__init__(
            f"{which} of task {task_path} has {size:,} bytes of arguments, over the broker's "
            f"max_payload_bytes of {limit:,}; nothing was stored (store large data elsewhere "
            "and pass a reference to it, or raise max_payload_bytes)"
        )


class InvalidOption(ThreadmillError, ValueError):
    """A task option, enqueue option or backend option that is unknown or out of range."""


class UnknownBackend(ThreadmillError, LookupError):
    """No installed backend handles the URL's scheme."""

    def __init__(self, url: str, scheme: str, installed: Iterable[str], hint: str | None) -> None:
        self.url = url
        self.scheme = scheme
        self.installed = sorted(installed)
        self.hint = hint
        names = ", ".join(f"{s}://" for s in self.installed) or "none"
        message = (
            f"no installed backend handles {scheme}:// (in {redact(url)!r}); "
            f"installed schemes: {names}"
        )
        if hint:
            message += f"; {hint}"
        super().__init__(message)


class BackendConflict(ThreadmillError):
    """Two plugins registered a backend for the same URL scheme."""

    def __init__(self, scheme: str, first: str, second: str) -> None:
        self.scheme = scheme
        self.sources = (first, second)
        super().__init__(
            f"the URL scheme {scheme}:// is registered twice: by {first} and by {second}; "
            "uninstall one of them"
        )


class BackendUnavailable(ThreadmillError, ConnectionError):
    """The backend could not be reached, or a connection dropped before the reply arrived.

    Backends raise it (or a subclass) for an outage, never for a refusal or a
    bad argument. Workers and the maintenance loop catch it, back off and try
    again. For an operation whose repeat is not recognised (a claim, a
    cancel) the change may or may not have been applied.
    """


class PayloadError(ThreadmillError, ValueError):
    """Stored bytes that do not decode to a task record (corrupt or foreign data)."""


class WaitTimeout(ThreadmillError, TimeoutError):
    """`Broker.wait` gave up before the task reached a terminal state."""

    def __init__(self, task_id: str, timeout: float) -> None:
        self.task_id = task_id
        self.timeout = timeout
        super().__init__(f"task {task_id!r} did not finish within {timeout:g} s")


class MemoryBrokerWarning(UserWarning):
    """A task went to the ``memory://`` default broker with no worker in this process.

    Warned once per process, by the first such `Task.enqueue`: no other
    process can see that task, so unless a `Worker` runs here it never runs.
    Set ``THREADMILL_URL`` (``memory://`` too, to say it is meant), or name a
    broker with ``using(broker=...)``; or filter this class, as any warning.
    """


class AcknowledgementTimeout(ThreadmillError):
    """Recorded as a task error when a lease expired before the worker acknowledged it.

    It is never raised to callers; the reaper appends it to the task's errors and
    asks the retry policy, exactly as for an exception raised by the task.
    """


class TaskQuarantined(ThreadmillError):
    """Recorded as a task error when a stored task cannot run at all (guarantee 6).

    Used when the stored record does not decode, its retry policy is not
    registered with the worker, or its function was not registered with any
    worker that claimed it within `threadmill_core.worker.execution.UNKNOWN_TASK_GRACE`
    of its enqueue; the task is finalized FAILED instead of cycling.
    """


class TimeLimitExceeded(ThreadmillError):
    """An attempt ran past its time limit (``@task(time_limit=...)``, see `threadmill_core.task`).

    Raised inside the task: in its thread as an asynchronous exception (at
    the next bytecode the thread runs), or as the cancellation of an
    ``async`` task on its loop. `finally` blocks and context managers run;
    the attempt then fails with this error through the task's retry policy.
    A task stuck where no exception can reach it (blocked in C code) is
    recorded FAILED with it after a grace, and its worker process replaced
    (see `threadmill_core.worker.interrupts`). It is an `Exception`, so a
    bare ``except Exception`` in the task swallows it: re-raise it there.
    """

    def __init__(self, message: str = "the attempt ran past its time limit") -> None:
        super().__init__(message)


class TaskCancelled(ThreadmillError):
    """A running task was cancelled by an operator (`threadmill_core.Broker.cancel`).

    Raised inside the task as `TimeLimitExceeded` is, once its worker hears
    of the request (at its next heartbeat); the attempt ends CANCELLED, with
    this error recorded, and is never retried. A task may also check
    `threadmill_core.TaskContext.cancel_requested` and stop on its own. A
    bare ``except Exception`` in the task swallows it: re-raise it there.
    """

    def __init__(self, message: str = "the task was cancelled while it ran") -> None:
        super().__init__(message)
