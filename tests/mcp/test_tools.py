"""Catalog entries as tools, the key a call without one gets, and the ids the status tool
takes (no server needed)."""

from __future__ import annotations

import httpx
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError
from moat_client import CapabilityInfo

from starter.mcp import MoatTools
from starter.mcp.tools import STATUS_TOOL, derived_key, tool_of

ENTRY = {
    "id": "slack.post_message",
    "version": "1.0.0",
    "adapter": "slack",
    "adapter_id": "slack@1",
    "description": "Post a message.",
    "effect_type": "API_CALL",
    "required_scopes": [],
    "timeout_seconds": 10,
    "requires_approval": True,
    "retry": {"max_retries": 5, "base_delay_seconds": 1},
    "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
}


def test_a_tool_per_capability_with_the_key_and_only_if_listed_the_connection() -> None:
    plain = tool_of(CapabilityInfo.model_validate(ENTRY))
    assert plain.name == "slack_post_message" and plain.title == "slack.post_message"
    assert set(plain.input_schema["properties"]) == {"text", "idempotency_key"}
    assert "approve" in (plain.description or "")
    connected = tool_of(CapabilityInfo.model_validate({**ENTRY, "connection_types": ["slack"]}))
    assert "connection_id" in connected.input_schema["properties"]
    assert ENTRY["input_schema"]["properties"] == {"text": {"type": "string"}}  # not mutated


def test_the_derived_key_is_the_canonical_call() -> None:
    key = derived_key("demo.echo", {"a": 1, "b": [1, 2]})
    assert key == derived_key("demo.echo", {"b": [1, 2], "a": 1.0})  # JCS: 1.0 is 1
    assert key != derived_key("demo.echo", {"a": 1, "b": [2, 1]})
    assert key != derived_key("demo.other", {"a": 1, "b": [1, 2]})
    assert key != derived_key("demo.echo", {"a": 1, "b": [1, 2]}, "conn-1")
    assert key.startswith("mcp:sha256:") and len(key) <= 256


@pytest.mark.parametrize(
    "receipt_id",
    [
        "../../v1/connections",
        "..",
        "0190a2b4-5c6d-7e8f-9a0b-1c2d3e4f5a6b/../../v1/connections",
        "0190a2b4-5c6d-7e8f-9a0b-1c2d3e4f5a6b?x=1",
        "%2e%2e%2f%2e%2e%2fv1%2fconnections",
        "0190A2B4-5C6D-7E8F-9A0B-1C2D3E4F5A6B",
    ],
)
async def test_the_status_tool_refuses_what_is_not_a_receipt_id_and_sends_nothing(
    receipt_id: str,
) -> None:
    """The id goes into a URL path: ``../../v1/connections`` would read another route."""
    sent: list[httpx.Request] = []

    def gateway(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        raise AssertionError(f"a request was sent: {request.method} {request.url.path}")

    tools = MoatTools(
        "http://gateway.test",
        "moat_x_y",
        http=httpx.AsyncClient(transport=httpx.MockTransport(gateway)),
    )
    try:
        with pytest.raises(MCPError) as refused:
            await tools.call_tool(None, STATUS_TOOL, {"receipt_id": receipt_id})
    finally:
        await tools.aclose()
    assert refused.value.code == types.INVALID_PARAMS
    assert refused.value.message.startswith(
        "receipt_id must be the receipt_id a tool call answered"
    )
    assert sent == []
