"""One trace from the HTTP request to the provider call, exported over OTLP when configured;
log lines in JSON with the trace id; no secret in any log line."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from starter.runtime import observability
from tests.support.fakes import FakeProvider, Step
from tests.support.stack import Stack

SECRET = "ghp_" + "Z" * 36


def _provider() -> TracerProvider:
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider), "the gateway's setup installs the SDK provider"
    return provider


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The spans the test's process ends while the test runs (exported as they end)."""
    exporter = InMemorySpanExporter()
    processor = SimpleSpanProcessor(exporter)
    _provider().add_span_processor(processor)
    try:
        yield exporter
    finally:
        processor.shutdown()


async def test_one_trace_from_the_request_to_the_provider(
    stack: Stack, provider: FakeProvider, spans: InMemorySpanExporter
) -> None:
    url = provider.script("/traced", Step(200))
    body = {"method": "POST", "url": url, "json": {"n": 1}}
    response = await stack.execute("http.request", body, key="traced")
    assert response.status_code == 200, response.text
    trace_id = response.json()["trace_id"]
    assert response.headers["x-moat-trace-id"] == trace_id
    # The provider call carries the same trace (W3C traceparent: version-trace-span-flags).
    (call,) = provider.calls_to("/traced")
    assert call.headers["traceparent"].split("-")[1] == trace_id
    names = {
        s.name for s in spans.get_finished_spans() if format(s.context.trace_id, "032x") == trace_id
    }
    assert "POST /v1/executions" in names
    assert "StartWorkflow:ExecuteCapability" in names
    assert "RunWorkflow:ExecuteCapability" in names
    assert "RunActivity:moat.call_adapter" in names


async def test_a_callers_traceparent_makes_the_request_part_of_its_trace(
    stack: Stack, provider: FakeProvider, spans: InMemorySpanExporter
) -> None:
    caller_trace, caller_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    url = provider.script("/continued", Step(200))
    response = await stack.execute(
        "http.request",
        {"method": "POST", "url": url, "json": {"n": 1}},
        key="continued",
        headers_extra={"traceparent": f"00-{caller_trace}-{caller_span}-01"},
    )
    assert response.status_code == 200, response.text
    assert response.json()["trace_id"] == caller_trace
    assert response.headers["x-moat-trace-id"] == caller_trace
    (call,) = provider.calls_to("/continued")
    assert call.headers["traceparent"].split("-")[1] == caller_trace
    # One span for the request (not one per layer), a server span, child of the caller's.
    requests = [
        s
        for s in spans.get_finished_spans()
        if format(s.context.trace_id, "032x") == caller_trace and s.name.startswith("POST ")
    ]
    assert [s.name for s in requests] == ["POST /v1/executions"]
    (server,) = requests
    assert server.kind == trace.SpanKind.SERVER
    assert server.parent is not None and format(server.parent.span_id, "016x") == caller_span
    assert server.attributes is not None
    assert server.attributes["http.route"] == "/v1/executions"
    assert server.attributes["http.response.status_code"] == 200


class _Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP trace receiver: keeps every export request it is sent."""

    received: list[ExportTraceServiceRequest] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        assert self.path == "/v1/traces"
        assert self.headers["Content-Type"] == "application/x-protobuf"
        self.received.append(ExportTraceServiceRequest.FromString(body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[str]:
    _Collector.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        thread.join()


async def test_spans_are_exported_over_otlp_when_configured(
    stack: Stack, collector: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert observability.span_exporter_from_env({}) is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector)
    exporter = observability.span_exporter_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": collector})
    assert exporter is not None
    processor = BatchSpanProcessor(exporter)
    _provider().add_span_processor(processor)
    try:
        response = await stack.execute("demo.echo", {"otlp": True}, key="otlp")
        assert response.status_code == 200, response.text
        # The export runs in the processor's thread; flush it without blocking the loop.
        assert await asyncio.to_thread(processor.force_flush, 10_000)
    finally:
        await asyncio.to_thread(processor.shutdown)
    trace_id = bytes.fromhex(response.json()["trace_id"])
    exported = [
        span
        for request in _Collector.received
        for resource_spans in request.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
        if span.trace_id == trace_id
    ]
    names = {span.name for span in exported}
    assert {"POST /v1/executions", "RunWorkflow:ExecuteCapability"} <= names, names


def test_log_lines_are_json_with_the_trace_id_and_no_secret() -> None:
    observability.install_redaction()
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(observability.JsonFormatter("moat-test"))
    log = logging.getLogger("moat.test.json")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    tracer = TracerProvider().get_tracer("moat.test")
    try:
        with tracer.start_as_current_span("work") as span:
            log.info("calling with %s", f"Authorization: Bearer {SECRET}")
            try:
                raise RuntimeError(f"provider echoed {SECRET}")
            except RuntimeError:
                log.exception("it failed")
        context = span.get_span_context()
    finally:
        log.removeHandler(handler)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["level"] for line in lines] == ["info", "error"]
    assert SECRET not in out.getvalue()
    assert "[REDACTED]" in lines[0]["message"] and "RuntimeError" in lines[1]["exception"]
    assert {line["trace_id"] for line in lines} == {format(context.trace_id, "032x")}
    assert {line["span_id"] for line in lines} == {format(context.span_id, "016x")}


@pytest.mark.parametrize("depth", [20_000])
def test_a_deeply_nested_url_is_logged_redacted_without_an_error(depth: int) -> None:
    """Each URL inside another's query was once redacted by a nested call: a few thousand
    levels raised ``RecursionError`` out of the logging call."""
    observability.install_redaction()
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    log = logging.getLogger("moat.test.nested")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    nested = "https://a.example/?next=" * depth + "https://b.example/?access_token=S3CR3T"
    try:
        log.info("redirected to %s", nested)
        log.info("and %s", "https://h.example/?u=" * depth + f"https://user:{SECRET}@c.example/")
    finally:
        log.removeHandler(handler)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert "S3CR3T" not in lines[0] and "access_token=[REDACTED]" in lines[0]
    assert SECRET not in lines[1] and "://[REDACTED]@c.example/" in lines[1]
