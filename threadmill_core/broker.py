"""`Broker`: what applications hold. It wraps one backend with the task API.

``connect(url)`` picks the backend by URL scheme through the plugin manager;
`default_broker()` is the one ``Task.enqueue`` uses when a task names none:
``THREADMILL_URL`` from the environment, else ``memory://``. Inside the
worker processes of ``threadmill worker`` that is the worker's own URL (see
`threadmill_core.worker.process`), so a task that enqueues a follow-up task
sends it where the worker claims. A producer whose default is ``memory://``
because ``THREADMILL_URL`` is unset, with no `Worker` made in its process,
gets a `MemoryBrokerWarning` at its first enqueue (`producer_broker`).
"""

from __future__ import annotations

import functools
import math
import os
import threading
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

import attrs

from threadmill_core import payload_limit, tracing
from threadmill_core.backend import Backend
from threadmill_core.calls import CallCheck
from threadmill_core.clock import from_ms, to_ms
from threadmill_core.errors import InvalidOption, MemoryBrokerWarning, TaskNotFound, WaitTimeout
from threadmill_core.ids import new_task_id, new_task_ids
from threadmill_core.models import (
    QueueCounts,
    TaskCall,
    TaskResult,
    TaskResultStatus,
    validate_run_after,
)
from threadmill_core.options import positive_int
from threadmill_core.payload_limit import DEFAULT_MAX_PAYLOAD_BYTES
from threadmill_core.plugins import backend_for_url, notify, notify_each
from threadmill_core.urls import redact

DEFAULT_URL = "memory://"


class Enqueueable(Protocol):
    """What `Broker.enqueue` needs of a task: a `threadmill_core.Task` is one.

    `template` is the record every stored call starts from (task path,
    queue, priority, retry policy), `run_after` the task's own delay or time,
    `call_check` what refuses a call that does not fit the task's signature
    (None: unchecked).
    """

    @property
    def call_check(self) -> CallCheck | None: ...

    @property
    def template(self) -> TaskResult: ...

    @property
    def run_after(self) -> datetime | timedelta | None: ...


class Broker:
    """A backend plus the task API: enqueue calls, fetch results, inspect and steer queues.

    `max_payload_bytes` bounds each call's arguments as stored (see
    `threadmill_core.payload_limit`; default 1 MiB): a larger call is refused
    at enqueue with `PayloadTooLarge`.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        url: str | None = None,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> None:
        if not isinstance(backend, Backend):
            raise TypeError(f"Broker needs a threadmill_core.Backend, got {backend!r}")
        self.backend = backend
        self.url = url
        self.max_payload_bytes = positive_int("max_payload_bytes", max_payload_bytes)

    def __repr__(self) -> str:
        """The broker's URL, its password hidden (`threadmill_core.urls.redact`)."""
        return f"Broker({redact(self.url) if self.url else type(self.backend).__name__})"

    # --- producing -------------------------------------------------------------------

    def enqueue(self, task: Enqueueable, /, *args: Any, **kwargs: Any) -> TaskResult:
        """Store one call of `task`; return the stored record.

        `task` is positional only, so a task's own keyword arguments may be
        named ``task`` (or ``self``).

        A call that does not fit the task's signature raises `InvalidCall`
        naming the task and the mismatch; arguments the codec cannot carry
        raise `UnsupportedValue` naming them (e.g. ``kwargs['when']``);
        arguments of more than `max_payload_bytes` raise `PayloadTooLarge`
        with the size and the limit. Either way nothing is stored.

        With tracing on (`threadmill_core.tracing`), the call is stored in a
        PRODUCER span whose W3C trace context the record keeps in its
        `headers` (`enqueue_many`: one span for the batch).
        """
        shared = self._shared(task)
        check = task.call_check
        if check is not None:
            check.check(shared.task_path, args, kwargs)
        payload_limit.check_call(shared.task_path, args, kwargs, self.max_payload_bytes)
        # `kwargs` is this call's own dict already; the args are copied into a list.
        calls: list[TaskCall] = [(new_task_id(), [*args], kwargs)]
        if tracing.tracer is None:
            [stored] = self.backend.enqueue_calls(shared, calls)
        else:  # a PRODUCER span, its context kept in the record's headers
            [stored] = tracing.enqueue_traced(self.backend.enqueue_calls, shared, calls)
        notify("threadmill_task_enqueued", record=stored)
        return stored

    def enqueue_many(
        self,
        task: Enqueueable,
        calls: Iterable[tuple[Sequence[Any], Mapping[str, Any]]],
        *,
        ids: Sequence[str] | None = None,
    ) -> list[TaskResult]:
        """Store many calls of `task` in one backend call; all are checked before any is stored.

        Each call is ``(args, kwargs)``, copied into a list and a dict. A call
        that does not fit the task's signature raises `InvalidCall` with its
        `index` in the batch, one the codec cannot carry `UnsupportedValue`
        naming it, one of more than `max_payload_bytes` `PayloadTooLarge`
        with its `index`; in each case none of the calls is stored.

        `ids`, one per call, are the tasks' ids, for a caller that had to name
        them before storing (`threadmill_core.ids.new_task_id` makes them); by default each call
        gets a new one. As enqueue is idempotent on id, a call whose id is
        stored already is not stored again: its stored record is returned.
        A count of `ids` other than the calls' raises `ValueError`, storing
        nothing.
        """
        shared = self._shared(task)
        calls = list(calls)
        if ids is None:
            ids = new_task_ids(len(calls))
        elif isinstance(ids, str) or len(ids) != len(calls):
            raise ValueError(
                f"enqueue_many: ids must be one id per call ({len(calls)}), got {ids!r}"
            )
        check = task.call_check
        if check is not None:
            check.check_all(shared.task_path, calls)
        made: list[TaskCall] = [
            (task_id, list(args), dict(kwargs))
            for task_id, (args, kwargs) in zip(ids, calls, strict=True)
        ]
        payload_limit.check_batch(shared.task_path, made, self.max_payload_bytes)
        if tracing.tracer is None:
            stored = self.backend.enqueue_calls(shared, made)
        else:  # one PRODUCER span for the batch (see threadmill_core.tracing)
            stored = tracing.enqueue_traced(self.backend.enqueue_calls, shared, made)
        notify_each("threadmill_task_enqueued", "record", stored)
        return stored

    def _shared(self, task: Enqueueable) -> TaskResult:
        """The record every call of `task` stored now starts from (its run_after made absolute)."""
        template = getattr(task, "template", None)
        if not isinstance(template, TaskResult):
            raise TypeError(f"enqueue takes a @task function, got {task!r}")
        run_after = self._absolute(task.run_after)
        if run_after is None:
            return template
        return attrs.evolve(template, run_after=run_after)

    def _absolute(self, run_after: datetime | timedelta | None) -> datetime | None:
        run_after = validate_run_after(run_after)
        if isinstance(run_after, timedelta):
            # Relative delays are measured on the backend's clock (the one
            # clock), so a producer whose own clock is off still defers right.
            return None if not run_after else self.backend.now() + run_after
        if run_after is None:
            return None
        # Storage keeps whole milliseconds; round up so a task never runs early.
        ms = to_ms(run_after) + (1 if run_after.microsecond % 1000 else 0)
        try:
            return from_ms(ms)
        except OverflowError:  # the last millisecond of year 9999, rounded up
            raise InvalidOption(
                f"run_after rounds up to whole milliseconds past datetime's range: {run_after!r}"
            ) from None

    # --- results -------------------------------------------------------------------------

    def get_result(self, task_id: str) -> TaskResult:
        """The task's current record; `TaskNotFound` if unknown, purged or expired."""
        record = self.backend.get(task_id)
        if record is None:
            raise TaskNotFound(task_id)
        return record

    def wait(self, task_id: str, timeout: float = 30.0) -> TaskResult:
        """Poll until the task is SUCCESSFUL, FAILED or CANCELLED; return its record.

        Raises `WaitTimeout` after `timeout` seconds (wall time; an int or a
        float, ``math.inf`` to wait for good) and `TaskNotFound` if the task
        does not exist. A NaN timeout, which no deadline ever passes, or one
        that is no number is an `InvalidOption`, before anything is read.
        """
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or math.isnan(timeout):
            raise InvalidOption(
                f"wait() takes a timeout in seconds, an int or a float (not NaN), got {timeout!r}"
            )
        deadline = time.monotonic() + timeout
        pause = 0.005
        while True:
            record = self.get_result(task_id)
            if record.is_finished:
                return record
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeout(task_id, timeout)
            time.sleep(min(pause, remaining))
            pause = min(pause * 2, 0.2)

    # --- inspection and operator actions ------------------------------------------------

    def counts(self) -> Mapping[str, QueueCounts]:
        """Counts per segment for every queue that holds a task."""
        return self.backend.counts()

    def peek(
        self, queue: str, status: TaskResultStatus, *, offset: int = 0, limit: int = 100
    ) -> list[TaskResult]:
        """Records of one segment of one queue, in segment order."""
        return self.backend.peek(queue, status, offset=offset, limit=limit)

    def requeue(self, task_id: str) -> TaskResult | None:
        """FAILED or CANCELLED back to READY; None (refused) for any other status."""
        return self.backend.requeue(task_id)

    def cancel(self, task_id: str) -> TaskResult | None:
        """Cancel a task: READY or DEFERRED to CANCELLED (`Backend.cancel`); for a RUNNING task,
        a cancel request (`Backend.request_cancel`); None (refused) otherwise.

        A cancel request comes back as the RUNNING record with its
        `cancel_requested_at` set. Its worker hears of it at its next
        heartbeat (within a third of the lease TTL): `TaskCancelled` is
        raised inside the task, which ends CANCELLED, never retried, unless
        it finished first (it then keeps its outcome).
        """
        cancelled = self.backend.cancel(task_id)
        if cancelled is not None:
            return cancelled
        return self.backend.request_cancel(task_id)

    def purge(self, queue: str, status: TaskResultStatus) -> int:
        """Drop one segment of a queue (not RUNNING); returns how many tasks went."""
        return self.backend.purge(queue, status)

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def connect(url: str, **options: Any) -> Broker:
    """A broker over the backend that `url`'s scheme selects.

    ``memory://`` is bundled; ``redis://``, ``rediss://`` and ``unix://``
    come with the ``redis`` extra; third-party backends add their own
    schemes. Options are the backend's (see its docs), but for the
    broker's own `max_payload_bytes`, which `url`'s query may give as well;
    unknown ones raise `InvalidOption`, and an unknown scheme raises
    `UnknownBackend` listing the installed ones. With ``THREADMILL_TRACING=1``
    in the environment it switches tracing on in this process (see
    `threadmill_core.tracing`).
    """
    backend_url, limit = payload_limit.take_option(url, options)
    tracing.enable_from_environment()
    return Broker(backend_for_url(backend_url, options), url=url, max_payload_bytes=limit)


_default_lock = threading.Lock()


@functools.cache
def _default_broker(url: str) -> Broker:
    return connect(url)


def default_broker() -> Broker:
    """The process-wide broker from ``THREADMILL_URL``, else ``memory://``.

    Made on first use and shared afterwards, so producers and an in-process
    worker see the same memory backend.
    """
    url = os.environ.get("THREADMILL_URL") or DEFAULT_URL
    with _default_lock:
        return _default_broker(url)


#: Whether a producer's enqueue may still have to warn (`producer_broker`): true
#: until the first warning, or until a `Worker` is made in this process.
_may_warn = True


def worker_made() -> None:
    """Note that this process runs a `Worker`: its memory broker has a consumer."""
    global _may_warn
    _may_warn = False


def producer_broker() -> Broker:
    """`default_broker()` for a task that names none; warns once if tasks would vanish there.

    The warning (`MemoryBrokerWarning`) comes when ``THREADMILL_URL`` is
    unset, so the default is ``memory://`` by omission, and no `Worker` was
    made in this process: nothing else could ever run the task. It comes
    before the task is stored, so a warnings filter that makes it an error
    stores nothing.
    """
    if _may_warn and not os.environ.get("THREADMILL_URL"):
        worker_made()  # once: the flag is cleared before warning
        warnings.warn(
            "this task goes to the default broker, memory://, which no other process sees, "
            "and no Worker runs in this process: set THREADMILL_URL (memory:// to keep "
            "this one), or name a broker with task.using(broker=...)",
            MemoryBrokerWarning,
            stacklevel=3,
        )
    return default_broker()
