"""OpenTelemetry tracing in one process: producer and consumer spans, and tracing off."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tests.core import stopped_tasks, tasks
from tests.core.running_checks import Running
from tests.faults.runs import wait_until
from tests.spans import recorded
from threadmill_core import Broker, FakeClock, TaskResultStatus, Worker, connect, tracing
from threadmill_core.errors import InvalidOption


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on, the exporter emptied; off again afterwards."""
    exporter = recorded()
    exporter.clear()
    tracing.enable()
    yield exporter
    tracing.disable()
    exporter.clear()


def of_kind(exporter: InMemorySpanExporter, kind: SpanKind) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.kind is kind]


def test_a_task_enqueued_in_a_span_runs_in_a_consumer_span_of_its_trace(
    broker: Broker, spans: InMemorySpanExporter
) -> None:
    """The consumer span is a child of the producer span, linked to it, in the caller's trace."""
    with trace.get_tracer("test").start_as_current_span("request") as request:
        record = tasks.echo.using(broker=broker).enqueue(7)
    assert set(record.headers) == {"traceparent"}
    assert broker.get_result(record.id).headers == record.headers
    Worker(broker, queues=["default"]).run(burst=True)

    [producer] = of_kind(spans, SpanKind.PRODUCER)
    [consumer] = of_kind(spans, SpanKind.CONSUMER)
    trace_id = request.get_span_context().trace_id
    assert producer.context is not None
    assert consumer.context is not None
    assert producer.context.trace_id == consumer.context.trace_id == trace_id
    assert producer.parent is not None
    assert producer.parent.span_id == request.get_span_context().span_id
    assert consumer.parent is not None
    assert consumer.parent.span_id == producer.context.span_id
    assert [link.context.span_id for link in consumer.links] == [producer.context.span_id]
    assert producer.name == "send default"
    assert consumer.name == "process default"
    assert dict(producer.attributes or {}) == {
        "messaging.system": "threadmill",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": "default",
        "threadmill.task.name": "tests.core.tasks:echo",
        "messaging.message.id": record.id,
    }
    assert dict(consumer.attributes or {}) == {
        "messaging.system": "threadmill",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "default",
        "threadmill.task.name": "tests.core.tasks:echo",
        "messaging.message.id": record.id,
        "threadmill.task.attempt": 1,
        "threadmill.task.outcome": "successful",
    }
    assert consumer.status.status_code is StatusCode.UNSET


def test_each_attempt_of_a_retried_task_has_its_own_consumer_span(
    broker: Broker, clock: FakeClock, spans: InMemorySpanExporter
) -> None:
    """Three attempts (two failures, then success): three consumer spans under one producer,
    each failure recorded as an exception event with the ERROR status."""
    record = tasks.flaky.using(broker=broker).enqueue(fail_times=2)
    worker = Worker(broker, queues=["default"])
    for delay in (0, 10, 20):
        clock.advance(timedelta(seconds=delay))
        worker.run(burst=True)
    assert broker.get_result(record.id).status is TaskResultStatus.SUCCESSFUL

    [producer] = of_kind(spans, SpanKind.PRODUCER)
    consumers = of_kind(spans, SpanKind.CONSUMER)
    assert producer.context is not None
    assert [s.attributes["threadmill.task.attempt"] for s in consumers if s.attributes] == [1, 2, 3]
    outcomes = [(s.attributes or {}).get("threadmill.task.outcome") for s in consumers]
    assert outcomes == ["retried", "retried", "successful"]
    assert {s.parent.span_id for s in consumers if s.parent} == {producer.context.span_id}
    for failed in consumers[:2]:
        assert failed.status.status_code is StatusCode.ERROR
        [event] = failed.events
        assert event.name == "exception"
        attributes = dict(event.attributes or {})
        assert attributes["exception.type"] == "builtins.ConnectionError"
        assert "attempt" in str(attributes["exception.message"])
        assert "Traceback" in str(attributes["exception.stacktrace"])
    assert consumers[2].events == ()


def test_a_final_failure_is_recorded_as_failed(broker: Broker, spans: InMemorySpanExporter) -> None:
    """An exception the policy does not retry ends the one consumer span as ``failed``."""
    tasks.wrong_kind.using(broker=broker).enqueue()
    Worker(broker, queues=["default"]).run(burst=True)
    [consumer] = of_kind(spans, SpanKind.CONSUMER)
    assert (consumer.attributes or {})["threadmill.task.outcome"] == "failed"
    assert consumer.status.status_code is StatusCode.ERROR
    assert [dict(e.attributes or {})["exception.type"] for e in consumer.events] == [
        "builtins.KeyError"
    ]


def test_enqueue_many_makes_one_producer_span_for_the_batch(
    broker: Broker, spans: InMemorySpanExporter
) -> None:
    """A batch is one ``send`` span with its size; every task of it carries its context."""
    stored = broker.enqueue_many(tasks.echo, [((i,), {}) for i in range(3)])
    [producer] = of_kind(spans, SpanKind.PRODUCER)
    assert (producer.attributes or {})["messaging.batch.message_count"] == 3
    assert producer.context is not None
    span_id = f"{producer.context.span_id:016x}"
    assert all(span_id in record.headers["traceparent"] for record in stored)


def test_with_tracing_off_no_span_is_made_and_no_header_stored(broker: Broker) -> None:
    """Off (the default), a task enqueued inside a span stores no headers and runs untraced."""
    exporter = recorded()
    exporter.clear()
    assert tracing.tracer is None
    with trace.get_tracer("test").start_as_current_span("request"):
        record = tasks.echo.using(broker=broker).enqueue(1)
    assert record.headers == {}
    assert broker.get_result(record.id).headers == {}
    Worker(broker, queues=["default"]).run(burst=True)
    assert [span.name for span in exporter.get_finished_spans()] == ["request"]


def test_the_environment_variable_switches_tracing_on_and_refuses_other_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """THREADMILL_TRACING=1 turns tracing on at connect; a value other than 0 or 1 is refused."""
    monkeypatch.setenv("THREADMILL_TRACING", "yes")
    with pytest.raises(InvalidOption, match=r"THREADMILL_TRACING must be 1 \(on\) or 0"):
        connect("memory://")
    assert tracing.tracer is None
    monkeypatch.setenv("THREADMILL_TRACING", "1")
    try:
        connect("memory://").close()
        assert tracing.tracer is not None
    finally:
        tracing.disable()


def test_a_tracestate_too_long_for_the_headers_is_left_out_and_the_trace_kept(
    broker: Broker, spans: InMemorySpanExporter
) -> None:
    """A caller's tracestate past the headers' bounds does not fail the enqueue: the task
    keeps the traceparent alone, and still runs in the caller's trace."""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    state = ",".join(f"vendor{i:02}={'v' * 240}" for i in range(32))
    incoming = {
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "tracestate": state,
    }
    context = TraceContextTextMapPropagator().extract(incoming)
    with trace.get_tracer("test").start_as_current_span("request", context=context):
        record = tasks.echo.using(broker=broker).enqueue(1)
    assert set(record.headers) == {"traceparent"}
    assert "0af7651916cd43dd8448eb211c80319c" in record.headers["traceparent"]
    Worker(broker, queues=["default"]).run(burst=True)
    [consumer] = of_kind(spans, SpanKind.CONSUMER)
    assert consumer.context is not None
    assert consumer.context.trace_id == 0x0AF7651916CD43DD8448EB211C80319C


def test_a_task_cancelled_while_it_runs_is_recorded_as_cancelled(
    broker: Broker, spans: InMemorySpanExporter
) -> None:
    """A task cancelled while it runs ends CANCELLED, and so does its consumer span's outcome
    (``cancelled``, not ``failed``), with the `TaskCancelled` as its exception event."""
    stopped_tasks.gate.clear()
    record = stopped_tasks.waits.using(broker=broker).enqueue()
    running = Running(broker)
    try:
        wait_until(lambda: stopped_tasks.seen("waits:start"), 10, "the task to start")
        assert broker.cancel(record.id) is not None
        wait_until(lambda: broker.get_result(record.id).is_finished, 10, "the task to end")
    finally:
        stopped_tasks.gate.set()
        running.stop()
    assert broker.get_result(record.id).status is TaskResultStatus.CANCELLED
    [consumer] = of_kind(spans, SpanKind.CONSUMER)
    assert (consumer.attributes or {})["threadmill.task.outcome"] == "cancelled"
    assert [dict(e.attributes or {})["exception.type"] for e in consumer.events] == [
        "threadmill_core.errors.TaskCancelled"
    ]
