"""The MCP server's spans speak the OpenTelemetry MCP conventions, and a tool call goes on
in its caller's trace: the client's ``params._meta.traceparent`` is the parent of the
server's ``tools/call`` span, whose context the gateway call carries on (the gateway's
span, the run and the adapter's ``execute_tool`` span are all in that trace)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from mcp import Client
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from starter.mcp import MoatTools, build_server
from starter.mcp.tracing import server_attributes
from tests.runtime.test_genai_spans import spans, spans_of
from tests.support.stack import Stack

__all__ = ["spans"]  # the fixture, shared with the adapter span's tests

CALLER_TRACE, CALLER_SPAN = 0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7


async def test_a_tool_call_is_a_span_of_the_callers_trace(
    stack: Stack, spans: InMemorySpanExporter
) -> None:
    trace_id, caller_span = format(CALLER_TRACE, "032x"), format(CALLER_SPAN, "016x")
    meta: Any = {"traceparent": f"00-{trace_id}-{caller_span}-01", "tracestate": "agent=t61"}
    tools = MoatTools(stack.url, stack.api_key)
    try:
        async with Client(build_server(tools)) as client:
            result = await client.call_tool("demo_echo", {"traced": 1}, meta=meta)
            bad = await client.call_tool("http_request", {"url": 42}, meta=meta)
    finally:
        await tools.aclose()
    assert not result.is_error, result.content
    envelope: dict[str, Any] = result.structured_content
    assert envelope["trace_id"] == trace_id

    (served,) = spans_of(spans, trace_id, "tools/call demo_echo")
    assert served.kind == SpanKind.SERVER
    # Its parent is the caller's span, as the request's _meta named it.
    assert served.parent is not None and served.parent.is_remote
    assert served.parent.span_id == CALLER_SPAN
    assert served.context.trace_state.get("agent") == "t61"
    attributes = dict(served.attributes or {})
    assert attributes["mcp.method.name"] == "tools/call"
    assert attributes["gen_ai.operation.name"] == "execute_tool"
    assert attributes["gen_ai.tool.name"] == "demo_echo"
    assert attributes["gen_ai.tool.type"] == "extension"
    assert attributes["jsonrpc.request.id"]
    assert attributes["moat.capability.id"] == "demo.echo"
    assert attributes["moat.receipt_id"] == envelope["receipt_id"]
    assert "error.type" not in attributes

    gateway = spans_of(spans, trace_id, "POST /v1/executions")
    parents = {g.parent.span_id for g in gateway if g.parent is not None}
    assert served.context.span_id in parents  # the gateway's span of the call is its child
    (tool,) = spans_of(spans, trace_id, "execute_tool demo.echo")
    assert dict(tool.attributes or {})["gen_ai.tool.call.id"] == envelope["receipt_id"]

    # A tool error (here the gateway's refusal of the arguments) marks the span.
    assert bad.is_error
    (refused,) = spans_of(spans, trace_id, "tools/call http_request")
    assert dict(refused.attributes or {})["error.type"] == "tool_error"
    assert refused.status.status_code == StatusCode.ERROR


def test_streamable_http_spans_name_the_session_and_transport() -> None:
    request = SimpleNamespace(headers={"mcp-session-id": "191c4850af6c49e08843a3f6c80e5046"})
    ctx: Any = SimpleNamespace(method="tools/call", request=request)
    assert server_attributes(ctx, "tcp") == {
        "network.transport": "tcp",
        "network.protocol.name": "http",
        "mcp.session.id": "191c4850af6c49e08843a3f6c80e5046",
        "gen_ai.tool.type": "extension",
    }
    listing: Any = SimpleNamespace(method="tools/list", request=None)
    assert server_attributes(listing, "pipe") == {"network.transport": "pipe"}
