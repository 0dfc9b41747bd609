"""OpenTelemetry tracing through Django's task API: enqueue and run traced as in the core."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from tests.django.bench import Bench
from tests.django.djapp import tasks
from tests.spans import recorded
from threadmill_core import tracing


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on, the exporter emptied; off again afterwards."""
    exporter = recorded()
    exporter.clear()
    tracing.enable()
    yield exporter
    tracing.disable()
    exporter.clear()


def test_a_django_task_enqueued_in_a_span_runs_in_a_consumer_span_of_its_trace(
    bench: Bench, spans: InMemorySpanExporter
) -> None:
    """Django's ``Task.enqueue`` makes the PRODUCER span and stores its context; the worker
    runs the task in a CONSUMER span that is its child, in the request's trace."""
    with trace.get_tracer("test").start_as_current_span("request") as request:
        result = tasks.echo.enqueue(1)
    assert set(bench.broker.get_result(result.id).headers) == {"traceparent"}
    assert bench.work() == 1
    [producer] = [s for s in spans.get_finished_spans() if s.kind is SpanKind.PRODUCER]
    [consumer] = [s for s in spans.get_finished_spans() if s.kind is SpanKind.CONSUMER]
    assert producer.context is not None
    assert consumer.context is not None
    assert consumer.context.trace_id == request.get_span_context().trace_id
    assert consumer.parent is not None
    assert consumer.parent.span_id == producer.context.span_id
    assert (consumer.attributes or {})["messaging.message.id"] == result.id
