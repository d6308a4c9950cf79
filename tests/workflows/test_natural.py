"""Exactly once by nature, end to end: gateway, workflow, the real activities and Postgres,
and the GitHub and Slack fakes.

``github.close_issue`` and ``slack.delete_message`` undo what ``github.create_issue`` and
``slack.post_message`` did. A provider that performs the close or the deletion and then
drops its answer makes Temporal retry the adapter; the retry leaves the same state: the
issue closed once, the message deleted once (the retry answered ``message_not_found``,
which on a repeat means done)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from schemas.capabilities import BUILTIN_CAPABILITIES, CapabilityCatalog, RetrySettings
from starter.devstack.providers import FakeGithub, FakeSlack, Misbehaviour
from store import events as event_log
from store import tenancy
from tests.support.stack import Stack, StackFactory

FAST = ("github.close_issue", "slack.delete_message")


def _fast(spec: Any) -> Any:
    if spec.id not in FAST:
        return spec
    retry = RetrySettings(max_retries=3, base_delay_seconds=0.05)
    return spec.model_copy(update={"timeout_seconds": 2.0, "retry": retry})


CATALOG = CapabilityCatalog(tuple(_fast(s) for s in BUILTIN_CAPABILITIES))


@pytest_asyncio.fixture(loop_scope="session")
async def stack(
    make_stack: StackFactory, slack: FakeSlack, github: FakeGithub
) -> AsyncIterator[Stack]:
    allow = [slack.allow_entry, github.allow_entry]
    async with make_stack(catalog=CATALOG, http_allow_hosts=allow) as s:
        yield s


async def _tool_events(stack: Stack, receipt_id: str) -> list[str]:
    async with stack.sessions.begin() as session:
        await tenancy.set_tenant(session, stack.tenant_id)
        events = await event_log.events_of(session, stack.tenant_id, receipt_id)
    return [e.event_type.value for e in events if e.event_type.value.startswith("TOOL_")]


async def test_close_issue_closes_once_though_its_answer_is_lost(
    stack: Stack, github: FakeGithub
) -> None:
    con = await stack.add_connection("github", "ghp_e2e", config={"base_url": github.base_url})
    repo = f"r{uuid.uuid4().hex[:8]}"
    made = await stack.execute(
        "github.create_issue", {"owner": "o", "repo": repo, "title": "T"}, connection_id=con
    )
    assert made.status_code == 200, made.text
    number = made.json()["output"]["number"]
    close = {"owner": "o", "repo": repo, "number": number, "state_reason": "not_planned"}
    github.fail_next(1, Misbehaviour.DROP)
    r = await stack.execute("github.close_issue", close, key=repo, connection_id=con)
    assert r.status_code == 200, r.text
    envelope = r.json()
    [issue] = github.issues_of("o", repo)
    assert envelope["status"] == "executed"
    assert envelope["output"] == {
        "number": number,
        "html_url": issue["html_url"],
        "state": "closed",
    }
    assert (issue["state"], issue["state_reason"]) == ("closed", "not_planned")
    assert github.closes_of("o", repo, number) == 1
    # The dropped answer was retried: two calls, one closing.
    types = await _tool_events(stack, envelope["receipt_id"])
    assert types == ["TOOL_CALLED", "TOOL_FAILED", "TOOL_CALLED", "TOOL_COMPLETED"]
    patches = len([c for c in github.calls(f"/{repo}/issues/{number}") if c.method == "PATCH"])
    assert patches == 2

    # The same request is answered from its receipt; a new one finds the issue closed.
    again = await stack.execute("github.close_issue", close, key=repo, connection_id=con)
    assert again.headers.get("X-Moat-Idempotent-Replayed") == "true"
    assert again.json()["receipt_id"] == envelope["receipt_id"]
    fresh = await stack.execute("github.close_issue", close, connection_id=con)
    assert fresh.status_code == 200, fresh.text
    assert fresh.json()["receipt_id"] != envelope["receipt_id"]
    assert fresh.json()["output"] == envelope["output"]
    assert github.closes_of("o", repo, number) == 1


async def test_delete_message_deletes_once_though_its_answer_is_lost(
    stack: Stack, slack: FakeSlack
) -> None:
    con = await stack.add_connection("slack", "xoxb-e2e", config={"base_url": slack.base_url})
    channel = "C" + uuid.uuid4().hex[:10].upper()
    posted = await stack.execute(
        "slack.post_message", {"channel": channel, "text": "oops"}, connection_id=con
    )
    assert posted.status_code == 200, posted.text
    ts = posted.json()["output"]["ts"]
    slack.fail_next(1, Misbehaviour.LATE, late_seconds=5)
    r = await stack.execute(
        "slack.delete_message", {"channel": channel, "ts": ts}, connection_id=con
    )
    assert r.status_code == 200, r.text
    envelope = r.json()
    assert envelope["status"] == "executed"
    assert envelope["output"] == {"channel": channel, "ts": ts, "already_deleted": True}
    assert slack.deleted(channel) == [ts]
    assert slack.posted(channel) == []
    types = await _tool_events(stack, envelope["receipt_id"])
    assert types == ["TOOL_CALLED", "TOOL_FAILED", "TOOL_CALLED", "TOOL_COMPLETED"]

    # A new execution's first attempt has no earlier one to have deleted the message.
    gone = await stack.execute(
        "slack.delete_message", {"channel": channel, "ts": ts}, key=channel, connection_id=con
    )
    assert gone.status_code == 502, gone.text
    assert gone.json()["status"] == "failed"
    assert gone.json()["error"]["code"] == "provider_not_found"
    assert slack.deleted(channel) == [ts]


async def test_capabilities_show_natural(stack: Stack) -> None:
    caps = (await stack.http.get(f"{stack.url}/v1/capabilities")).json()
    shown = {c["id"]: (c["idempotency"], c["connection_types"]) for c in caps}
    assert shown["github.close_issue"] == ("natural", ["github"])
    assert shown["slack.delete_message"] == ("natural", ["slack"])
    [one] = [c for c in caps if c["id"] == "github.close_issue"]
    assert one["input_schema"]["required"] == ["owner", "repo", "number"]
    assert one["required_scopes"] == ["execute:github.close_issue"]
    assert one["input_schema"]["properties"]["number"]["minimum"] == 1
