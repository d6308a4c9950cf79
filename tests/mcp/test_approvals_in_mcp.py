"""Approvals through MCP, with the ``mcp`` SDK's own client on the server object: an
approver's session lists, shows and decides while the requester's session waits (the same
rules as the API: the digest shown, separation of duties, the scopes); and the requester's
own session asked through elicitation where the rule says ``approve_in_session``."""

from __future__ import annotations

import asyncio
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from sqlalchemy import select

from schemas.approvals import approval_id_for
from schemas.events import EventType
from starter.mcp import InSessionApprovals, MoatTools, build_server
from store.keyrings.codec import OutputSealer
from store.keyrings.start import StartKeyring
from store.models import ApprovalRow, OrchestrationEvent
from tests.gateway.test_policy import new_key, put_policy
from tests.support.fakes import FakeProvider, Step
from tests.support.stack import STACK_KEY_SCOPES, Stack

REQUESTER_SCOPES = [*STACK_KEY_SCOPES, "approvals:write"]


def strict(**rule: Any) -> dict[str, Any]:
    return {
        "mode": "strict",
        "rules": [
            {"capability": "http.*", "requires_approval": True} | rule,
            {"capability": "demo.echo", "requires_approval": True},
        ],
    }


def call(url: str) -> dict[str, Any]:
    return {"method": "POST", "url": url, "json": {"text": "hi", "api_token": "s3cret"}}


def code_of(result: types.CallToolResult) -> str:
    assert result.is_error, result.content
    code: str = result.structured_content["error"]["code"]
    return code


async def status_when_done(client: Client, receipt_id: str) -> types.CallToolResult:
    for _ in range(200):
        status = await client.call_tool("moat_execution_status", {"receipt_id": receipt_id})
        if status.structured_content["status"] != "accepted":
            return status
        await asyncio.sleep(0.1)
    raise AssertionError("the run did not end")


@pytest.mark.timeout(120)
async def test_an_approver_session_lists_shows_and_decides_while_the_requester_waits(
    stack: Stack, provider: FakeProvider
) -> None:
    await put_policy(stack, await new_key(stack, ["policy:write"]), strict())
    url = provider.script("/mcp-approver", Step(201, {"ok": True}))
    requester_key = await new_key(stack, REQUESTER_SCOPES)
    approver_key = await new_key(stack, ["approvals:read", "approvals:write"])
    requester, approver = MoatTools(stack.url, requester_key), MoatTools(stack.url, approver_key)
    reader = MoatTools(stack.url, await new_key(stack, ["outputs:read"]))
    try:
        async with (
            Client(build_server(requester)) as mine,
            Client(build_server(approver)) as theirs,
            Client(build_server(reader)) as nobody,
        ):
            # A client without elicitation: accepted, with the approval to hand to a person.
            held = await mine.call_tool("http_request", call(url))
            assert not held.is_error and held.structured_content["status"] == "accepted"
            approval_id = held.structured_content["approval"]["id"]
            assert approval_id in held.content[0].text  # type: ignore[union-attr]

            listed = await theirs.call_tool("moat_list_approvals", {})
            [entry] = [a for a in listed.structured_content["approvals"] if a["id"] == approval_id]
            assert entry["status"] == "pending" and entry["capability_id"] == "http.request"
            assert entry["requested_by"].startswith("key:") and entry["expires_at"]
            assert entry["input_hash"] and entry["policy_version"] >= 1
            assert code_of(await nobody.call_tool("moat_list_approvals", {})) == "scope_missing"

            shown = await theirs.call_tool("moat_show_approval", {"approval_id": approval_id})
            seen = shown.structured_content
            assert seen["input"]["json"]["api_token"] == "[REDACTED]"
            assert seen["hidden"] == ["input.json.api_token"]
            assert "s3cret" not in str(shown.content)

            decision = {
                "approval_id": approval_id,
                "action": "approve",
                "input_hash": seen["input_hash"],
                "policy_version": seen["policy_version"],
                "comment": "checked the text",
            }
            wrong = decision | {"input_hash": "sha256:" + "0" * 64}
            assert code_of(await theirs.call_tool("moat_decide_approval", wrong)) == (
                "approval_mismatch"
            )
            own = await mine.call_tool("moat_decide_approval", decision)
            assert code_of(own) == "self_approval_forbidden"
            assert provider.calls_to("/mcp-approver") == []

            decided = await theirs.call_tool("moat_decide_approval", decision)
            assert not decided.is_error, decided.content
            assert decided.structured_content["status"] == "approved"
            assert decided.structured_content["decided_by"].startswith("key:")
            done = await status_when_done(mine, held.structured_content["receipt_id"])
            assert done.structured_content["status"] == "executed"
            assert len(provider.calls_to("/mcp-approver")) == 1
    finally:
        for tools in (requester, approver, reader):
            await tools.aclose()


class Person:
    """A client's elicitation: answers each form with the next scripted action."""

    def __init__(self, *actions: str) -> None:
        self.actions = list(actions)
        self.asked: list[types.ElicitRequestParams] = []

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        self.asked.append(params)
        action = self.actions.pop(0)
        content = {"comment": "mine, go"} if action == "accept" else None
        return types.ElicitResult(action=action, content=content)  # type: ignore[arg-type]


@pytest.mark.timeout(120)
async def test_the_requester_decides_in_their_own_session_where_the_rule_allows(
    stack: Stack, provider: FakeProvider
) -> None:
    await put_policy(stack, await new_key(stack, ["policy:write"]), strict(approve_in_session=True))
    url = provider.script("/mcp-in-session", Step(201, {"ok": True}))
    tools = MoatTools(stack.url, stack.api_key, in_session=door_of(stack))
    person = Person("accept", "decline", "cancel")
    try:
        async with Client(build_server(tools), elicitation_callback=person) as client:
            ran = await client.call_tool("http_request", call(url))
            assert not ran.is_error, ran.content
            assert ran.structured_content["status"] == "executed"
            assert len(provider.calls_to("/mcp-in-session")) == 1
            [form] = person.asked
            assert "http.request" in form.message and "[REDACTED]" in form.message
            assert "s3cret" not in form.message
            row = await the_decision_is_marked_in_session(stack, ran.structured_content)
            assert row.input_hash in form.message and row.approved_digest == row.input_hash

            declined = await client.call_tool("http_request", call(url + "?n=2"))
            assert code_of(declined) == "approval_rejected"
            left = await client.call_tool("http_request", call(url + "?n=3"))
            assert left.structured_content["status"] == "accepted"
            assert left.structured_content["approval"]["status"] == "pending"
            # A rule without approve_in_session: no form, the call waits for an approver.
            echo = await client.call_tool("demo_echo", {"a": 1})
            assert echo.structured_content["status"] == "accepted"
            assert len(person.asked) == 3
            assert len(provider.calls_to("/mcp-in-session")) == 1

        # A client without elicitation on the same server: accepted, with the approval id.
        async with Client(build_server(tools)) as plain:
            held = await plain.call_tool("http_request", call(url + "?n=4"))
            assert held.structured_content["status"] == "accepted"
            assert held.structured_content["approval"]["id"] in held.content[0].text  # type: ignore[union-attr]
    finally:
        await tools.aclose()


def door_of(stack: Stack) -> InSessionApprovals:
    return InSessionApprovals(
        stack.sessions,
        stack.client,
        OutputSealer.from_settings(stack.settings),
        StartKeyring.from_settings(stack.settings),
    )


@pytest.mark.timeout(60)
async def test_a_client_of_the_initialize_handshake_is_asked_over_its_back_channel(
    stack: Stack, provider: FakeProvider
) -> None:
    """Protocol versions up to 2025-11-25: the server asks while the call is open."""
    await put_policy(stack, await new_key(stack, ["policy:write"]), strict(approve_in_session=True))
    url = provider.script("/mcp-legacy", Step(201, {"ok": True}))
    person = Person("accept")
    # The door as ``moat mcp --approve-in-session`` opens it: the gateway's settings.
    async with InSessionApprovals.connected(stack.settings, stack.client) as door:
        tools = MoatTools(stack.url, stack.api_key, in_session=door)
        try:
            async with Client(
                build_server(tools), mode="legacy", elicitation_callback=person
            ) as client:
                ran = await client.call_tool("http_request", call(url))
        finally:
            await tools.aclose()
    assert ran.structured_content["status"] == "executed", ran.content
    assert len(person.asked) == 1 and len(provider.calls_to("/mcp-legacy")) == 1


async def the_decision_is_marked_in_session(stack: Stack, envelope: dict[str, Any]) -> ApprovalRow:
    async with stack.sessions() as s:
        row = await s.get(ApprovalRow, approval_id_for(envelope["receipt_id"]))
        assert row is not None and row.status == "approved"
        assert row.decided_by == row.requested_by and row.comment == "mine, go"
        granted = (
            await s.execute(
                select(OrchestrationEvent.event_data).where(
                    OrchestrationEvent.aggregate_id == row.id,
                    OrchestrationEvent.event_type == EventType.APPROVAL_GRANTED.value,
                )
            )
        ).scalar_one()
    assert granted["in_session"] is True
    return row
