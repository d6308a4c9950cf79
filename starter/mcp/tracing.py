"""The MCP server's spans in the OpenTelemetry MCP conventions, and the caller's trace
carried on into the gateway.

The SDK opens each message's SERVER span itself (``tools/call {tool}``, with
``mcp.method.name``, ``jsonrpc.request.id``, ``mcp.protocol.version``, on a tool call
``gen_ai.operation.name`` ``execute_tool`` and ``gen_ai.tool.name``, ``error.type`` on
failure) and makes the trace context in the request's ``params._meta`` (``traceparent``,
``tracestate``) its parent. ``ServerAttributes`` adds what only this server knows:
``mcp.session.id`` (Streamable HTTP's ``Mcp-Session-Id``), ``network.transport``
(``tcp`` over HTTP, ``pipe`` over stdio), ``network.protocol.name`` and, on a tool call,
``gen_ai.tool.type``; the call itself adds Moat's ``moat.capability.id`` and
``moat.receipt_id`` (``note_call``).

Every request to the gateway carries the current span as its ``traceparent``
(``carry_trace``), so the gateway's span of the call, and the run's below it, are in the
caller's trace.
"""

from __future__ import annotations

from typing import Any

import httpx
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from opentelemetry import propagate, trace

from schemas.telemetry import (
    MCP_SESSION_ID,
    MOAT_CAPABILITY_ID,
    MOAT_RECEIPT_ID,
    NETWORK_PROTOCOL_NAME,
    NETWORK_TRANSPORT,
    TOOL_TYPE,
    TOOL_TYPE_EXTENSION,
)

SESSION_HEADER = "mcp-session-id"
TOOLS_CALL = "tools/call"


class ServerAttributes:
    """Server middleware, inside the SDK's tracing one: it adds the transport's and the
    session's attributes to the span of each message."""

    def __init__(self, transport: str | None = None) -> None:
        """``transport``: ``tcp`` (Streamable HTTP), ``pipe`` (stdio) or None (in process)."""
        self._transport = transport

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        span = trace.get_current_span()
        if span.is_recording():
            span.set_attributes(server_attributes(ctx, self._transport))
        return await call_next(ctx)


def server_attributes(ctx: ServerRequestContext[Any, Any], transport: str | None) -> dict[str, str]:
    """What the conventions ask of a message's span that the SDK does not set."""
    attributes: dict[str, str] = {}
    if transport is not None:
        attributes[NETWORK_TRANSPORT] = transport
    headers = getattr(ctx.request, "headers", None)
    if headers is not None:
        attributes[NETWORK_PROTOCOL_NAME] = "http"
        session = headers.get(SESSION_HEADER)
        if session:
            attributes[MCP_SESSION_ID] = session
    if ctx.method == TOOLS_CALL:
        attributes[TOOL_TYPE] = TOOL_TYPE_EXTENSION
    return attributes


def note_call(capability_id: str, receipt_id: str | None) -> None:
    """Moat's own attributes of a tool call, on the current (the message's) span."""
    span = trace.get_current_span()
    span.set_attribute(MOAT_CAPABILITY_ID, capability_id)
    if receipt_id:
        span.set_attribute(MOAT_RECEIPT_ID, receipt_id)


async def carry_trace(request: httpx.Request) -> None:
    """An ``httpx`` request hook: the current trace context as the request's
    ``traceparent`` (and ``tracestate``)."""
    propagate.inject(request.headers)
