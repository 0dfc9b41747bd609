"""The test process's OpenTelemetry tracer provider, recording into one in-memory exporter.

OpenTelemetry takes one global provider per process, so every test module that reads
spans shares this one (`recorded`), set up on first use.
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

_EXPORTER = InMemorySpanExporter()


def recorded() -> InMemorySpanExporter:
    """The exporter every span of this process ends in (the provider set up on first call)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    assert trace.get_tracer_provider() is provider, "another tracer provider was set up"
    return _EXPORTER
