"""``moat_run_plan`` on the live stack, through the ``mcp`` SDK's client on the server
object: a three-step plan whose steps use earlier outputs, the same plan again (its stored
answer: nothing runs twice, with or without a key), a dry run, an invalid plan as a tool
error naming its step, and a plan still running reported with how to ask again."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp import Client

from starter.mcp import MoatTools, build_server
from tests.client.test_plans_live import echo_plan, invalid_plan
from tests.support.stack import Stack


@asynccontextmanager
async def mcp_client(stack: Stack, **options: Any) -> AsyncIterator[Client]:
    tools = MoatTools(stack.url, stack.api_key, **options)
    try:
        async with Client(build_server(tools)) as client:
            yield client
    finally:
        await tools.aclose()


async def test_a_plan_runs_once_and_answers_its_steps(stack: Stack) -> None:
    tag = f"mcp-plan-{uuid.uuid4().hex[:12]}"
    async with mcp_client(stack) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert "steps" in listed["moat_run_plan"].input_schema["properties"]

        ran = await client.call_tool("moat_run_plan", echo_plan(tag))
        assert not ran.is_error, ran.content
        plan: dict[str, Any] = ran.structured_content
        assert plan["status"] == "executed" and plan["idempotency_key"].startswith("mcp:plan:")
        outputs = {s["id"]: s["output"] for s in plan["steps"]}
        assert outputs["b"] == {"tag": tag, "n": 1} and outputs["c"] == {"text": f"b said {tag}"}

        again = await client.call_tool("moat_run_plan", echo_plan(tag))
        assert again.structured_content["plan_id"] == plan["plan_id"]
        assert again.structured_content["replayed"] is True

        keyed = await client.call_tool(
            "moat_run_plan", {**echo_plan(tag), "idempotency_key": f"{tag}-k", "dry_run": True}
        )
        assert not keyed.is_error and keyed.structured_content["status"] == "planned"
        assert all(s["receipt_id"] is None for s in keyed.structured_content["steps"])

        bad = await client.call_tool("moat_run_plan", invalid_plan())
        assert bad.is_error and bad.structured_content["error"]["code"] == "plan_invalid"
        headline = bad.content[0].text  # type: ignore[union-attr]
        assert headline.startswith("plan_invalid") and "step a input" in headline


async def test_a_plan_still_running_says_how_to_ask_again(stack: Stack) -> None:
    """With a gateway told not to wait, a new plan answers accepted; calling the tool again
    with the same plan answers it once it ended, the same plan."""
    tag = f"mcp-accepted-{uuid.uuid4().hex[:12]}"
    async with mcp_client(stack, wait_seconds=0) as client:
        pending = await client.call_tool("moat_run_plan", echo_plan(tag))
        assert not pending.is_error
        assert pending.structured_content["status"] == "accepted"
        note = pending.content[0].text  # type: ignore[union-attr]
        assert "moat_run_plan again" in note
        assert pending.structured_content["idempotency_key"] in note
        for _ in range(100):
            asked = await client.call_tool("moat_run_plan", echo_plan(tag))
            if asked.structured_content["status"] != "accepted":
                break
            await asyncio.sleep(0.1)
        assert asked.structured_content["status"] == "executed"
        assert asked.structured_content["plan_id"] == pending.structured_content["plan_id"]
