"""A call that cannot succeed for want of its connection is refused at ingest, before any
key is claimed or run started: no receipt, no idempotency row, no workflow, so the same key
serves the corrected call.

The reproduction: ``slack.post_message`` with no ``connection_id`` and an explicit
``Idempotency-Key`` (a run that failed ``502 connection_required`` and burned the key for
the idempotency TTL), then the same key with a connection."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from mcp import Client
from sqlalchemy import func, select
from temporalio.service import RPCError, RPCStatusCode

from schemas.run import workflow_id_for
from starter.devstack.providers import FakeSlack
from starter.mcp import MoatTools, build_server
from store.models import IdempotencyClaim, PolicyDecisionRow, ReceiptRow
from tests.support.fakes import FakeProvider
from tests.support.stack import ADMIN_KEY, Stack, StackFactory

MESSAGE = {"channel": "C0INGEST", "text": "hello"}


@pytest_asyncio.fixture(loop_scope="session")
async def slack_stack(make_stack: StackFactory, slack: FakeSlack) -> AsyncIterator[Stack]:
    async with make_stack(http_allow_hosts=[slack.allow_entry]) as s:
        yield s


async def _nothing_claimed(stack: Stack, key: str) -> None:
    async with stack.sessions() as s:
        for model in (ReceiptRow, IdempotencyClaim, PolicyDecisionRow):
            count = await s.scalar(
                select(func.count()).select_from(model).filter_by(tenant_id=stack.tenant_id)
            )
            assert count == 0, model.__tablename__
    handle = stack.client.get_workflow_handle(workflow_id_for(stack.tenant_id, key))
    with pytest.raises(RPCError) as missing:
        await handle.describe()
    assert missing.value.status == RPCStatusCode.NOT_FOUND


async def test_no_connection_is_refused_at_ingest_and_the_key_stays_free(
    slack_stack: Stack, slack: FakeSlack
) -> None:
    stack, key = slack_stack, "post-hello-1"
    refused = await stack.execute("slack.post_message", MESSAGE, key=key)
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["code"] == "connection_required"
    assert "slack" in error["message"] and "POST /v1/connections" in error["message"]
    assert "moat connection add" in error["message"]
    assert error["details"]["accepted_types"] == ["slack"]
    assert refused.json().get("receipt") is None
    await _nothing_claimed(stack, key)
    assert slack.posted(MESSAGE["channel"]) == []

    # The corrected call, with the same key and a connection, runs.
    connection_id = await stack.add_connection(
        "slack", "xoxb-ingest", config={"base_url": f"{slack.base_url}/api"}
    )
    sent = await stack.execute("slack.post_message", MESSAGE, key=key, connection_id=connection_id)
    assert sent.status_code == 200, sent.text
    assert sent.json()["receipt"]["status"] == "success"
    assert [m["text"] for m in slack.posted(MESSAGE["channel"])] == ["hello"]


async def test_a_connection_a_capability_can_do_without_is_not_asked_for(
    stack: Stack, provider: FakeProvider
) -> None:
    # http.request takes an http_bearer connection but does not need one.
    done = await stack.execute("http.request", {"method": "GET", "url": provider.script("/open")})
    assert done.status_code == 200, done.text


async def test_a_revoked_connection_is_refused_before_a_new_execution_claims_its_key(
    slack_stack: Stack, slack: FakeSlack
) -> None:
    stack, key = slack_stack, "post-after-revoke"
    connection_id = await stack.add_connection(
        "slack", "xoxb-revoked", config={"base_url": f"{slack.base_url}/api"}
    )
    first = await stack.execute(
        "slack.post_message", MESSAGE, key="before-revoke", connection_id=connection_id
    )
    assert first.status_code == 200, first.text
    revoked = await stack.http.delete(
        f"{stack.url}/v1/admin/tenants/{stack.tenant_id}/connections/{connection_id}",
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
    )
    assert revoked.status_code == 200, revoked.text
    # A stored answer is replayed whatever became of its connection since.
    again = await stack.execute(
        "slack.post_message", MESSAGE, key="before-revoke", connection_id=connection_id
    )
    assert again.status_code == 200, again.text
    assert again.headers.get("x-moat-idempotent-replayed") == "true"
    # A new execution is refused before it claims its key or starts a run.
    refused = await stack.execute(
        "slack.post_message", MESSAGE, key=key, connection_id=connection_id
    )
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "connection_revoked"
    assert refused.json().get("receipt") is None
    async with stack.sessions() as s:
        held = await s.get(IdempotencyClaim, (stack.tenant_id, key))
    assert held is None
    with pytest.raises(RPCError):
        await stack.client.get_workflow_handle(workflow_id_for(stack.tenant_id, key)).describe()


async def test_an_mcp_tool_call_naming_no_connection_is_a_tool_error_saying_what_fits(
    slack_stack: Stack,
) -> None:
    """The MCP server goes through the same ingest: a tool error naming the code and the
    types, and the key stays free."""
    stack, key = slack_stack, "mcp-post-hello"
    tools = MoatTools(stack.url, stack.api_key)
    try:
        async with Client(build_server(tools)) as client:
            refused = await client.call_tool(
                "slack_post_message", {**MESSAGE, "idempotency_key": key}
            )
    finally:
        await tools.aclose()
    assert refused.is_error
    assert refused.structured_content is not None
    assert refused.structured_content["error"]["code"] == "connection_required"
    headline = refused.content[0].text  # type: ignore[union-attr]
    assert headline.startswith("connection_required") and "slack" in headline
    async with stack.sessions() as s:
        assert await s.get(IdempotencyClaim, (stack.tenant_id, key)) is None
