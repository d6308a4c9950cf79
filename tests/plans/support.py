"""What the plan tests share: posting a plan, reading its events, resetting its run."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from schemas.events import Event
from store import events as event_log
from store import tenancy
from tests.support.stack import Stack
from tests.workflows.test_replay import temporal_reset


async def post_plan(
    stack: Stack,
    plan: dict[str, Any],
    *,
    key: str | None = None,
    wait: float = 30,
    api_key: str | None = None,
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {api_key or stack.api_key}", "Prefer": f"wait={wait:g}"}
    if key is not None:
        headers["Idempotency-Key"] = key
    body = {"schema_version": "1", **plan}
    return await stack.http.post(f"{stack.url}/v1/plans", json=body, headers=headers)


async def get_plan(stack: Stack, plan_id: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    return await stack.http.get(f"{stack.url}/v1/plans/{plan_id}", headers=headers)


async def plan_action(
    stack: Stack, plan_id: str, action: str, body: dict[str, Any], *, wait: float = 30
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {stack.api_key}", "Prefer": f"wait={wait:g}"}
    return await stack.http.post(
        f"{stack.url}/v1/plans/{plan_id}/{action}", json=body, headers=headers
    )


async def until_done(stack: Stack, plan_id: str, seconds: float = 60) -> dict[str, Any]:
    for _ in range(int(seconds / 0.1)):
        shown = await get_plan(stack, plan_id)
        if shown.json()["status"] != "accepted":
            return dict(shown.json())
        await asyncio.sleep(0.1)
    raise AssertionError(f"plan {plan_id} still running")


async def events_of(stack: Stack, correlation_id: str) -> list[Event]:
    async with stack.sessions.begin() as session:
        await tenancy.set_tenant(session, stack.tenant_id)
        return await event_log.events_of(session, stack.tenant_id, correlation_id)


async def reset_plan(stack: Stack, workflow_id: str, kind: str) -> str:
    """``temporal workflow reset`` of the plan's current run; the new run's id once it ended."""
    handle = stack.client.get_workflow_handle(workflow_id)
    run_id = (await handle.describe()).run_id
    await temporal_reset(stack, workflow_id, run_id or "", kind)
    for _ in range(200):
        description = await handle.describe()
        if description.run_id != run_id and description.close_time is not None:
            return description.run_id or ""
        await asyncio.sleep(0.05)
    raise AssertionError("the reset run did not finish")
