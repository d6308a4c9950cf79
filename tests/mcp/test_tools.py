"""Catalog entries as tools, and the key a call without one gets (no server needed)."""

from __future__ import annotations

from moat_client import CapabilityInfo

from starter.mcp.tools import derived_key, tool_of

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
