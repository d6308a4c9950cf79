"""The adapter call's span speaks the OpenTelemetry GenAI conventions for tool execution
(``execute_tool {tool}``, ``gen_ai.*`` attributes, ``error.type`` on failure) with Moat's
own attributes beside them, in the request's trace."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tests.support.fakes import FakeProvider, Step
from tests.support.stack import Stack


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The spans this process ends while the test runs."""
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider), "the gateway's setup installs the SDK provider"
    exporter = InMemorySpanExporter()
    processor = SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    try:
        yield exporter
    finally:
        processor.shutdown()


def spans_of(exporter: InMemorySpanExporter, trace_id: str, name: str) -> list[ReadableSpan]:
    return [
        s
        for s in exporter.get_finished_spans()
        if s.name == name and format(s.context.trace_id, "032x") == trace_id
    ]


async def test_the_adapter_span_is_an_execute_tool_span(
    stack: Stack, provider: FakeProvider, spans: InMemorySpanExporter
) -> None:
    url = provider.script("/genai", Step(200))
    response = await stack.execute("http.request", {"method": "POST", "url": url}, key="genai")
    assert response.status_code == 200, response.text
    envelope = response.json()
    (span,) = spans_of(spans, envelope["trace_id"], "execute_tool http.request")
    assert span.kind == SpanKind.INTERNAL
    attributes = dict(span.attributes or {})
    assert {k: v for k, v in attributes.items() if k.startswith("gen_ai.")} == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "http.request",
        "gen_ai.tool.call.id": envelope["receipt_id"],
        "gen_ai.tool.type": "extension",
    }
    assert attributes["moat.receipt_id"] == envelope["receipt_id"]
    assert attributes["moat.adapter"] == "http" and attributes["moat.attempt"] == 1
    assert "error.type" not in attributes and span.status.status_code != StatusCode.ERROR
    # Its parent is the activity's span, and the provider call its child.
    (activity,) = spans_of(spans, envelope["trace_id"], "RunActivity:moat.call_adapter")
    assert span.parent is not None and span.parent.span_id == activity.context.span_id
    (call,) = provider.calls_to("/genai")
    assert call.headers["traceparent"].split("-")[2] == format(span.context.span_id, "016x")


async def test_a_provider_failure_marks_the_span_with_its_error_type(
    stack: Stack, provider: FakeProvider, spans: InMemorySpanExporter
) -> None:
    url = provider.script("/genai-refused", Step(422, body={"error": "invalid_title"}))
    response = await stack.execute("http.request", {"method": "POST", "url": url}, key="genai-f")
    assert response.status_code == 502, response.text
    envelope = response.json()
    (span,) = spans_of(spans, envelope["trace_id"], "execute_tool http.request")
    attributes = dict(span.attributes or {})
    assert attributes["error.type"] == "provider_invalid_input"
    assert attributes["moat.error.code"] == envelope["error"]["code"]
    assert attributes["moat.http.status"] == 422
    assert span.status.status_code == StatusCode.ERROR
    assert span.status.description == envelope["error"]["code"]
    assert "invalid_title" not in str(span.status.description)
