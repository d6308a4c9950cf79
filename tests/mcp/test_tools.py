"""Catalog entries as tools, the key a call without one gets, the ids the status tool takes,
and the plan tool (no server needed)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import httpx
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError
from moat_client import CapabilityInfo

from schemas.approvals import Approval
from schemas.capabilities import BUILTIN_CAPABILITIES
from schemas.email import EMAIL_SEND
from schemas.notion import CREATE_PAGE, UPDATE_PAGE
from schemas.plans import MAX_PLAN_KEY_LENGTH
from starter.mcp import MoatTools
from starter.mcp.approvals import APPROVAL_SPECS, hidden_paths
from starter.mcp.in_session import INPUT_KEY, Asked, Asking
from starter.mcp.tools import (
    PLAN_TOOL,
    PLAN_TOOL_SPEC,
    STATUS_TOOL,
    STATUS_TOOL_SPEC,
    derived_key,
    derived_plan_key,
    tool_of,
)

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


PLAN_STEPS = [
    {"id": "a", "capability_id": "demo.echo", "input": {"x": 1}},
    {"id": "b", "capability_id": "demo.echo", "input": {"y": "${steps.a.output.x}"}},
]


def test_the_plan_tool_takes_steps_and_a_key_short_enough_for_step_keys() -> None:
    schema = PLAN_TOOL_SPEC.input_schema
    assert PLAN_TOOL_SPEC.name == PLAN_TOOL == "moat_run_plan"
    assert schema["required"] == ["steps"]
    assert set(schema["properties"]) == {"steps", "on_failure", "dry_run", "idempotency_key"}
    assert schema["properties"]["idempotency_key"]["maxLength"] == MAX_PLAN_KEY_LENGTH
    assert "${steps." in (PLAN_TOOL_SPEC.description or "")
    key = derived_plan_key({"steps": PLAN_STEPS})
    assert key == derived_plan_key({"steps": [dict(reversed(s.items())) for s in PLAN_STEPS]})
    assert key != derived_plan_key({"steps": PLAN_STEPS, "on_failure": "compensate"})
    assert key.startswith("mcp:plan:sha256:") and len(key) <= MAX_PLAN_KEY_LENGTH


async def test_a_plan_call_sends_the_plan_under_a_derived_key_and_says_how_to_ask_again() -> None:
    sent: list[httpx.Request] = []
    answer = {"plan_id": "pln_1", "status": "accepted", "trace_id": "t", "steps": []}

    def gateway(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        key = request.headers["Idempotency-Key"]
        return httpx.Response(202, json={**answer, "idempotency_key": key})

    tools = MoatTools(
        "http://gateway.test",
        "moat_x_y",
        http=httpx.AsyncClient(transport=httpx.MockTransport(gateway)),
    )
    try:
        arguments = {"steps": PLAN_STEPS, "dry_run": False}
        accepted = await tools.call_tool(None, PLAN_TOOL, arguments)
        with pytest.raises(MCPError) as refused:
            await tools.call_tool(None, PLAN_TOOL, {"steps": "all of them"})
    finally:
        await tools.aclose()
    assert refused.value.code == types.INVALID_PARAMS
    assert [(r.method, r.url.path) for r in sent] == [("POST", "/v1/plans")]
    assert json.loads(sent[0].content) == {"schema_version": "1", "steps": PLAN_STEPS}
    key = derived_plan_key({"steps": PLAN_STEPS})
    assert sent[0].headers["Idempotency-Key"] == key
    assert not accepted.is_error and accepted.structured_content is not None
    assert accepted.structured_content["plan_id"] == "pln_1"
    note = accepted.content[0].text  # type: ignore[union-attr]
    assert "still running" in note and PLAN_TOOL in note and key in note


# capability: (readOnlyHint, destructiveHint, openWorldHint); idempotentHint is always true.
ANNOTATIONS = {
    "demo.echo": (True, False, False),
    "http.request": (False, True, True),
    "webhook.post": (False, True, True),
    "slack.post_message": (False, True, True),  # slack.delete_message cannot unsend it
    "slack.delete_message": (False, True, True),
    "slack.update_message": (False, True, True),  # the earlier text is gone
    "slack.auth_test": (True, False, True),
    "github.create_issue": (False, False, True),  # undone by github.close_issue
    "github.close_issue": (False, True, True),
    "github.rate_limit": (True, False, True),
    "notion.create_page": (False, False, True),  # undone by notion.update_page (trash)
    "notion.update_page": (False, True, True),
    "email.send": (False, True, True),
    "acme.unknown_read": (True, False, True),  # not in the table: by its effect type
    "acme.unknown_write": (False, True, True),
}


def test_every_tool_carries_truthful_annotations() -> None:
    effects = {
        spec.id: spec.effect_type.value
        for spec in (*BUILTIN_CAPABILITIES, CREATE_PAGE, UPDATE_PAGE, EMAIL_SEND)
    } | {"acme.unknown_read": "NONE", "acme.unknown_write": "SOR_UPDATE"}
    assert set(effects) == set(ANNOTATIONS)
    for capability_id, (read_only, destructive, open_world) in ANNOTATIONS.items():
        entry = {**ENTRY, "id": capability_id, "effect_type": effects[capability_id]}
        hints = tool_of(CapabilityInfo.model_validate(entry)).annotations
        assert hints is not None, capability_id
        assert (hints.read_only_hint, hints.destructive_hint, hints.open_world_hint) == (
            read_only,
            destructive,
            open_world,
        ), capability_id
        assert hints.idempotent_hint is True
    moat_tools = {t.name: t.annotations for t in (*APPROVAL_SPECS, STATUS_TOOL_SPEC)}
    for name, hints in moat_tools.items():
        assert hints is not None and hints.open_world_hint is False, name
        assert hints.idempotent_hint is True
    assert moat_tools["moat_list_approvals"].read_only_hint is True  # type: ignore[union-attr]
    assert moat_tools["moat_show_approval"].read_only_hint is True  # type: ignore[union-attr]
    decide = moat_tools["moat_decide_approval"]
    assert decide is not None and (decide.read_only_hint, decide.destructive_hint) == (False, True)
    assert PLAN_TOOL_SPEC.annotations is not None
    assert PLAN_TOOL_SPEC.annotations.destructive_hint is True


def test_what_redaction_hid_is_said_by_path() -> None:
    shown = {"json": {"api_token": "[REDACTED]", "n": [1, "x [REDACTED] y"]}, "url": "u"}
    assert hidden_paths(shown) == ["input.json.api_token", "input.json.n[1]"]
    assert hidden_paths({"a": 1}) == []


def test_the_in_session_form_shows_the_call_and_counts_an_answer_only_for_it() -> None:
    now = datetime.now(UTC)
    approval = Approval.model_validate(
        {
            "id": "apr_1",
            "status": "pending",
            "receipt_id": "r",
            "workflow_id": "w",
            "capability_id": "http.request",
            "capability_version": "1.0.0",
            "input_hash": "sha256:abc",
            "policy_version": 3,
            "requested_by": "key:k",
            "requested_at": now,
            "expires_at": now,
            "input": {"body": "x" * 5000, "api_token": "[REDACTED]"},
        }
    )
    asked = Asked("t", "key:k", approval)
    message = asked.form().message
    assert "http.request" in message and "sha256:abc" in message and "Policy version: 3" in message
    assert "cut: the input is" in message and len(message) < 4600
    accept = types.ElicitResult(action="accept")
    assert Asking(responses={INPUT_KEY: accept}, state=asked.state()).answer(asked) == accept
    other = Asked("t", "key:k", approval.model_copy(update={"input_hash": "sha256:def"}))
    assert Asking(responses={INPUT_KEY: accept}, state=other.state()).answer(asked) is None
    assert Asking(responses={}, state=asked.state()).answer(asked) is None
