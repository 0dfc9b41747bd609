"""OpenTelemetry tracing: a PRODUCER span per enqueue, a CONSUMER span per attempt.

Off by default, and explicit to switch on, like ``--metrics-port``: in a
producer, call `enable()` (or set ``THREADMILL_TRACING=1`` before its first
`threadmill_core.connect`); in ``threadmill worker``, pass ``--tracing``
(``manage.py threadmill worker`` takes it too), which switches it on in
every process of the command (`WorkerSettings.tracing`), so follow-up
tasks a task enqueues are traced as well. Either needs the
``otel`` extra (``pip install 'threadmill[otel]'``: `opentelemetry-api`);
what is exported, and where, is the application's own tracer provider
(`opentelemetry-sdk` and an exporter). With no provider configured the
API's no-op tracer makes spans that record nothing and carry no context, so
nothing is stored either.

While it is off, the hot path pays one test of a module global per enqueue
and per attempt (`tracer` is None), and nothing of OpenTelemetry is imported.

What is recorded, after the messaging semantic conventions
(``messaging.*``; the conventions are still in development, so names may
change with them):

- `Broker.enqueue` and `Broker.enqueue_many` (and threadmill_django's
  enqueue written in the caller's transaction) run in a PRODUCER span named
  ``send QUEUE`` (one for a batch), a child of the caller's current span.
  The span's W3C trace context (``traceparent``, ``tracestate``: the
  `TraceContextTextMapPropagator`, whatever the global propagator is, so the
  stored context stays small; a ``tracestate`` too long for the headers'
  bounds is left out, the trace kept) goes into each task's `TaskResult.headers`,
  which every backend stores beside the arguments and keeps through
  retries, give-backs and requeues. Attributes: ``messaging.system`` =
  ``threadmill``, ``messaging.operation.type`` / ``.name`` = ``send``,
  ``messaging.destination.name`` = the queue, ``messaging.message.id`` =
  the task id (one call) or ``messaging.batch.message_count`` (a batch),
  ``threadmill.task.name`` = the task path.
- Each attempt runs in a CONSUMER span named ``process QUEUE``: the task
  function runs inside it, so spans the task makes are its children.
  Attributes: ``messaging.system``, ``messaging.operation.type`` / ``.name``
  = ``process``, ``messaging.destination.name``, ``messaging.message.id``,
  ``threadmill.task.name``, ``threadmill.task.attempt`` (1 for the first),
  and ``threadmill.task.outcome``: ``successful``, ``retried``, ``failed``
  or ``cancelled`` (a cancel request stopped it while it ran). An attempt
  that fails or is cancelled has an ``exception`` event (``exception.type``
  = the exception's class path, ``exception.message``,
  ``exception.stacktrace``) and the ERROR status.

Parent and link: the conventions require a "process" span to link to the
message's creation context, and allow that context as its parent when one
message is processed (threadmill runs one task per span). Each attempt's
span does both: it is a child of the producer span, so a request's trace
shows the work it enqueued, every attempt of it as siblings under the
``send`` span, and it links to that span, so tools that follow links
(batch-oriented views) find it too. A task stored without trace context
(enqueued with tracing off, or before it was on) runs in a new root span.

A worker process about to end asks its provider to export what it still
holds (`flush`): a forked one ends in ``os._exit``, which runs no
``atexit`` handler, the SDK's way to flush a batch.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from threadmill_core.context import TaskContext
from threadmill_core.errors import InvalidOption
from threadmill_core.headers import headers_problem
from threadmill_core.models import Decision, Lease, TaskCall, TaskResult, TaskResultStatus

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

    from threadmill_core.task import Task

#: The environment variable that switches tracing on (``1``) in the processes that see it.
ENVIRONMENT_VARIABLE = "THREADMILL_TRACING"

#: The tracer while tracing is on; None while it is off (the hot path tests this alone).
tracer: Tracer | None = None

#: Seconds a worker process that ends waits for its provider to export its last spans.
FLUSH_TIMEOUT = 3.0

log = logging.getLogger("threadmill.worker")


def enable() -> None:
    """Switch tracing on in this process; `InvalidOption` if `opentelemetry-api` is missing.

    Idempotent. Spans go to the global tracer provider as it is when each span
    starts, so the provider may be set up before or after this call.
    """
    global tracer
    try:
        from opentelemetry import trace
    except ImportError as exc:
        raise InvalidOption(
            "tracing needs OpenTelemetry's API: pip install 'threadmill[otel]'"
        ) from exc
    tracer = trace.get_tracer("threadmill")


def disable() -> None:
    """Switch tracing off in this process: nothing is traced or stored from now on."""
    global tracer
    tracer = None


def flush() -> None:
    """Export the spans this process's tracer provider still holds, waiting at most
    `FLUSH_TIMEOUT` seconds; nothing while tracing is off.

    For a worker process about to end without running its `atexit` handlers
    (``os._exit``: a forked process's end, a stop now, a replacement), where
    the SDK's provider would have flushed its batch. A provider without
    ``force_flush`` (the API's no-op one) has nothing to export; an
    exporter's failure is logged, and the process ends all the same.
    """
    if tracer is None:
        return
    from opentelemetry import trace

    force_flush = getattr(trace.get_tracer_provider(), "force_flush", None)
    if force_flush is None:
        return
    try:
        if not force_flush(int(FLUSH_TIMEOUT * 1000)):
            log.warning("tracing: the spans left were not all exported within %g s", FLUSH_TIMEOUT)
    except Exception:
        log.exception("tracing: exporting the spans left failed")


def enable_from_environment() -> None:
    """`enable()` if ``THREADMILL_TRACING`` is ``1``; a value other than ``0``, ``1`` or
    empty is an `InvalidOption` naming it."""
    value = os.environ.get(ENVIRONMENT_VARIABLE, "")
    if value in ("", "0"):
        return
    if value != "1":
        raise InvalidOption(f"{ENVIRONMENT_VARIABLE} must be 1 (on) or 0 (off), got {value!r}")
    if tracer is None:
        enable()


@functools.cache
def _propagator() -> Any:
    """The W3C trace-context propagator, made once."""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator()


def _attributes(operation: str, record: TaskResult) -> dict[str, Any]:
    return {
        "messaging.system": "threadmill",
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
        "messaging.destination.name": record.queue,
        "threadmill.task.name": record.task_path,
    }


def enqueue_traced(
    store: Callable[[TaskResult, Sequence[TaskCall]], list[TaskResult]],
    template: TaskResult,
    calls: Sequence[TaskCall],
) -> list[TaskResult]:
    """`store(template, calls)` in a PRODUCER span whose context the tasks keep.

    `store` writes the calls and returns the stored records: a backend's
    `Backend.enqueue_calls`, or threadmill_django's write in the caller's
    transaction. The span's trace context is added to `template`'s headers
    (when the span carries one: a no-op tracer's does not, and nothing is
    added).
    """
    from opentelemetry.trace import SpanKind

    assert tracer is not None
    attributes = _attributes("send", template)
    if len(calls) == 1:
        attributes["messaging.message.id"] = calls[0][0]
    else:
        attributes["messaging.batch.message_count"] = len(calls)
    with tracer.start_as_current_span(
        f"send {template.queue}", kind=SpanKind.PRODUCER, attributes=attributes
    ):
        carrier: dict[str, str] = {}
        _propagator().inject(carrier)
        if carrier:
            headers = {**template.headers, **carrier}
            if headers_problem(headers) is not None:
                # A tracestate past the headers' bounds (W3C allows 32 entries of 256
                # characters): the trace goes on without the vendors' state.
                carrier.pop("tracestate", None)
                headers = {**template.headers, **carrier}
            template = attrs.evolve(template, headers=headers)
        return store(template, calls)


def call_traced(
    call: Callable[[Task[Any, Any], Lease, TaskContext | None], Decision],
    task: Task[Any, Any],
    lease: Lease,
    context: TaskContext | None,
) -> Decision:
    """`call(task, lease, context)` in a CONSUMER span, child of and linked to the producer's.

    The span ends before the decision is acknowledged: it is the attempt's
    run, and its outcome is the decision's (a retry, a final failure or a
    success).
    """
    from opentelemetry import trace
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode

    assert tracer is not None
    record = lease.record
    parent = _propagator().extract(record.headers) if record.headers else None
    produced = trace.get_current_span(parent).get_span_context() if parent else None
    links = [Link(produced)] if produced is not None and produced.is_valid else None
    attributes = _attributes("process", record)
    attributes["messaging.message.id"] = record.id
    attributes["threadmill.task.attempt"] = record.attempts
    with tracer.start_as_current_span(
        f"process {record.queue}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        links=links,
    ) as span:
        decision = call(task, lease, context)
        done = decision.record
        if done.status is TaskResultStatus.SUCCESSFUL:
            span.set_attribute("threadmill.task.outcome", "successful")
            return decision
        if done.status is TaskResultStatus.CANCELLED:  # a cancel request stopped it
            outcome = "cancelled"
        else:
            outcome = "failed" if decision.retry_delay is None else "retried"
        span.set_attribute("threadmill.task.outcome", outcome)
        if done.errors:
            error = done.errors[-1]
            span.add_event(
                "exception",
                {
                    "exception.type": error.exception_class_path,
                    "exception.message": error.message,
                    "exception.stacktrace": error.traceback,
                },
            )
            span.set_status(Status(StatusCode.ERROR, error.message))
        else:
            span.set_status(Status(StatusCode.ERROR))
        return decision
