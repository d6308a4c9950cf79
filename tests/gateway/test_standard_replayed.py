"""A replayed answer says so under the standard header name too (``Idempotent-Replayed``,
as the IETF Idempotency-Key draft and the Agentic Commerce Protocol name it), beside
Moat's own, for an execution and for a plan; a first run carries neither."""

from __future__ import annotations

import uuid

import httpx

from schemas.names import REPLAYED_HEADER, STANDARD_REPLAYED_HEADER
from tests.plans.test_plans_api import echo_plan, post_plan
from tests.support.stack import Stack


def replay_headers(response: httpx.Response) -> list[str | None]:
    return [response.headers.get(REPLAYED_HEADER), response.headers.get(STANDARD_REPLAYED_HEADER)]


async def test_a_replayed_execution_carries_both_headers(stack: Stack) -> None:
    key = f"std-{uuid.uuid4().hex}"
    first = await stack.execute("demo.echo", {"n": 1}, key=key)
    assert first.status_code == 200, first.text
    assert replay_headers(first) == [None, None]
    again = await stack.execute("demo.echo", {"n": 1}, key=key)
    assert again.status_code == 200 and again.json()["replayed"] is True
    assert replay_headers(again) == ["true", "true"]


async def test_a_replayed_plan_carries_both_headers(stack: Stack) -> None:
    key = f"std-plan-{uuid.uuid4().hex}"
    first = await post_plan(stack, echo_plan(), key=key)
    assert first.status_code == 200, first.text
    assert replay_headers(first) == [None, None]
    again = await post_plan(stack, echo_plan(), key=key)
    assert again.status_code == 200 and again.json()["plan_id"] == first.json()["plan_id"]
    assert replay_headers(again) == ["true", "true"]
