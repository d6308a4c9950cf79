"""Approvals in Slack, against the Slack fake with real request signatures: a new approval
is posted once (a duplicate request, a repeated hand-off, a fresh announcing run), its
buttons decide as the person mapped to the Slack user, binding the digest and version they
carry, and the message is replaced with the outcome once. Forged, stale, altered or
unsigned presses decide nothing; unmapped people, people without approvals:write or not
among the rule's approvers, and a press under a changed policy are refused in Slack and
leave the message as it was; a tenant's secret decides nothing of another tenant's.

Self-approval cannot arise here: the requester is always a key (``key:<id>``) and a Slack
press always decides as a person, so the two never coincide; the rule is the API's."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
import pytest_asyncio
from click.testing import Result
from temporalio.client import Client
from typer.testing import CliRunner

from activities.announce import Announcer
from schemas.names import ANNOUNCE_APPROVAL_WORKFLOW
from schemas.slack_approvals import AnnounceInput, AnnounceResult, announce_workflow_id
from starter.cli import app as cli
from starter.devstack.providers import FakeSlack
from store import tenancy
from store.models import PersonRow
from tests.gateway.test_approvals import budgets_on, call, finished, pending, strict
from tests.gateway.test_policy import ADMIN, bearer, new_key, put_policy
from tests.support.fakes import FakeProvider, Step
from tests.support.stack import Stack, StackFactory

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
CHANNEL_KEY_SCOPES = ["policy:write", "execute:*", "approvals:read"]


@pytest_asyncio.fixture(loop_scope="session")
async def stack(
    make_stack: StackFactory, provider: FakeProvider, slack: FakeSlack
) -> AsyncIterator[Stack]:
    async with make_stack(
        http_allow_hosts=[provider.allow_entry, slack.allow_entry],
        slack_response_url_prefix=f"{slack.base_url}/actions/",
    ) as s:
        yield s


def signed(body: bytes, secret: str = SECRET, at: int | None = None) -> dict[str, str]:
    """Slack's headers for ``body``: ``v0=`` HMAC-SHA256 of ``v0:{timestamp}:{body}``."""
    stamp = str(int(time.time()) if at is None else at)
    digest = hmac.new(secret.encode(), f"v0:{stamp}:".encode() + body, hashlib.sha256)
    return {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": "v0=" + digest.hexdigest(),
        "Content-Type": "application/x-www-form-urlencoded",
    }


def press_body(message: dict[str, Any], user: str, slack: FakeSlack, approve: bool = True) -> bytes:
    """A ``block_actions`` payload as Slack sends it for a press of one of the buttons."""
    buttons = next(b for b in message["blocks"] if b["type"] == "actions")["elements"]
    button = buttons[0 if approve else 1]
    payload = {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower()},
        "team": {"id": "T0FAKETEAM"},
        "container": {"type": "message", "message_ts": message["ts"]},
        "message": {"ts": message["ts"], "text": message["text"]},
        "response_url": slack.response_url(),
        "actions": [
            {
                "type": "button",
                "block_id": "moat_decision",
                "action_id": button["action_id"],
                "value": button["value"],
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }
    return urlencode({"payload": json.dumps(payload)}).encode()


async def press(
    stack: Stack, body: bytes, headers: dict[str, str], tenant_id: str | None = None
) -> httpx.Response:
    url = f"{stack.url}/v1/slack/interactions/{tenant_id or stack.tenant_id}"
    return await stack.http.post(url, content=body, headers=headers)


async def eventually(check: Callable[[], Any], seconds: float = 20.0) -> Any:
    for _ in range(int(seconds / 0.05)):
        found = check()
        if found:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError("not within the time allowed")


async def add_person(
    stack: Stack, handle: str, slack_user: str, scopes: list[str], tenant_id: str | None = None
) -> None:
    async with stack.sessions.begin() as s:
        await tenancy.set_tenant(s, tenant_id or stack.tenant_id)
        s.add(
            PersonRow(
                tenant_id=tenant_id or stack.tenant_id,
                handle=handle,
                scopes=scopes,
                slack_user_id=slack_user,
                created_by="admin",
            )
        )


async def configure(stack: Stack, slack: FakeSlack, secret: str = SECRET) -> tuple[str, str]:
    """A Slack connection and the approvals channel set with it; (channel, channel key)."""
    channel = f"C{uuid.uuid4().hex[:10].upper()}"
    con = await stack.add_connection("slack", "xoxb-approvals", config={"base_url": slack.base_url})
    key = await new_key(stack, CHANNEL_KEY_SCOPES)
    body = {"connection_id": con, "channel": channel, "signing_secret": secret}
    put = await stack.http.put(f"{stack.url}/v1/approvals/channel", json=body, headers=bearer(key))
    assert put.status_code == 200, put.text
    shown = await stack.http.get(f"{stack.url}/v1/approvals/channel", headers=bearer(key))
    assert shown.status_code == 200 and shown.json()["channel"] == channel
    assert secret not in put.text and secret not in shown.text
    assert shown.json()["interactivity_path"] == f"/v1/slack/interactions/{stack.tenant_id}"
    return channel, key


async def test_posted_once_approved_in_slack_runs_once(
    stack: Stack, provider: FakeProvider, slack: FakeSlack
) -> None:
    channel, key = await configure(stack, slack)
    await put_policy(stack, key, strict())
    await budgets_on(stack)
    url = provider.script("/slack-approve", Step(201, {"ok": True}))
    first = await pending(stack, url, "slack-1")
    approval = first["approval"]

    message = (await eventually(lambda: slack.posted(channel)))[0]
    text = json.dumps(message["blocks"])
    for shown in ("http.request", approval["input_hash"], approval["id"], "Expires"):
        assert shown in text
    assert "[REDACTED]" in text and "s3cret" not in text
    actions = next(b for b in message["blocks"] if b["type"] == "actions")["elements"]
    assert [b["text"]["text"] for b in actions] == ["Approve", "Reject"]
    assert json.loads(actions[0]["value"]) == {
        "approval_id": approval["id"],
        "input_hash": approval["input_hash"],
        "policy_version": approval["policy_version"],
    }

    # A duplicate request, a repeated hand-off and a fresh announcing run: still one message.
    again = await stack.execute("http.request", call(url), key="slack-1")
    assert again.json()["approval"]["id"] == approval["id"]
    await Announcer(stack.client, stack.settings.deliveries_task_queue).hand_off(
        stack.tenant_id, approval["id"], "requested"
    )
    rerun = await _announce_again(stack.client, stack, approval["id"])
    announced = await stack.client.get_workflow_handle(
        announce_workflow_id(stack.tenant_id, approval["id"], "requested"),
        result_type=AnnounceResult,
    ).result()
    assert announced.status == "success" and rerun.receipt_id == announced.receipt_id
    assert len(slack.posted(channel)) == 1

    await add_person(stack, "alice", "U0ALICE", ["approvals:write"])
    body = press_body(message, "U0ALICE", slack)
    answered = await press(stack, body, signed(body))
    assert answered.status_code == 200, answered.text
    assert answered.json()["outcome"] == "decided"
    assert answered.json()["message"] == "approved by person:alice"
    result = await finished(stack, first)
    assert result.receipt is not None and result.receipt.status.value == "success"
    assert len(provider.calls_to("/slack-approve")) == 1

    await eventually(lambda: slack.updated(channel))
    updated = slack.posted(channel)[0]
    assert updated["text"].startswith("Approved by person:alice at ")
    assert not any(b["type"] == "actions" for b in updated["blocks"])
    # A second press of the same button decides nothing more, and changes nothing.
    later = await press(stack, body, signed(body))
    assert later.json()["code"] == "approval_not_pending"
    assert slack.updated(channel) == [message["ts"]]
    assert len(provider.calls_to("/slack-approve")) == 1


async def _announce_again(client: Client, stack: Stack, approval_id: str) -> AnnounceResult:
    """The announcing workflow run again under another id, as a reset would run it."""
    result: AnnounceResult = await client.execute_workflow(
        ANNOUNCE_APPROVAL_WORKFLOW,
        AnnounceInput(tenant_id=stack.tenant_id, approval_id=approval_id, stage="requested"),
        id=f"announce-again-{uuid.uuid4().hex}",
        task_queue=stack.settings.deliveries_task_queue,
        result_type=AnnounceResult,
    )
    return result


async def test_refused_presses_decide_nothing(
    stack: Stack, provider: FakeProvider, slack: FakeSlack
) -> None:
    channel, key = await configure(stack, slack)
    await put_policy(stack, key, strict(approvers=["person:alice"]))
    await budgets_on(stack)
    url = provider.script("/slack-refused", Step(201, {"ok": True}))
    first = await pending(stack, url, "slack-2")
    approval = first["approval"]
    message = (await eventually(lambda: slack.posted(channel)))[0]
    await add_person(stack, "alice", "U0ALICE2", ["approvals:write"])
    await add_person(stack, "bob", "U0BOB", ["approvals:write"])
    await add_person(stack, "dave", "U0DAVE", ["approvals:read"])
    body = press_body(message, "U0ALICE2", slack)

    # Not Slack's: a wrong secret, a stale timestamp, a changed byte, no headers.
    stale = int(time.time()) - 301
    altered = body.replace(b"U0ALICE2", b"U0ALICE3")
    for headers, sent in (
        (signed(body, secret="another-secret-of-16+"), body),
        (signed(body, at=stale), body),
        (signed(body), altered),
        ({"Content-Type": "application/x-www-form-urlencoded"}, body),
    ):
        refused = await press(stack, sent, headers)
        assert refused.status_code == 401, refused.text
        assert refused.json()["error"]["code"] == "unauthenticated"
    assert await status_of(stack, approval["id"]) == "pending"

    # Signed, but the person may not decide: refused in Slack, the message left as it was.
    for user, code in (
        ("U0NOBODY", "forbidden"),
        ("U0DAVE", "scope_missing"),
        ("U0BOB", "forbidden"),
    ):
        sent = press_body(message, user, slack)
        answered = await press(stack, sent, signed(sent))
        assert answered.status_code == 200 and answered.json()["code"] == code, answered.text
    said = await eventually(lambda: len(slack.responses) >= 3 and slack.responses)
    assert all(r["response_type"] == "ephemeral" for r in said)
    assert any("forbidden" in r["text"] for r in said)
    assert await status_of(stack, approval["id"]) == "pending"

    # The policy changed since the button was shown: stale, not decided.
    await put_policy(stack, key, strict(approvers=["person:alice"], approval_ttl_seconds=600))
    answered = await press(stack, body, signed(body))
    assert answered.json()["code"] == "approval_stale"
    await eventually(lambda: any("approval_stale" in r["text"] for r in slack.responses))
    assert slack.updated(channel) == []

    # Another tenant's secret: its own route knows no such approval; ours refuses it.
    other, _ = await stack.new_tenant()
    con = await stack.add_connection(
        "slack", "xoxb-other", config={"base_url": slack.base_url}, tenant_id=other
    )
    await _channel_of(stack, other, con, "other-tenant-secret-0001")
    await add_person(stack, "alice", "U0ALICE2", ["approvals:write"], tenant_id=other)
    forged = signed(body, secret="other-tenant-secret-0001")
    assert (await press(stack, body, forged)).status_code == 401
    across = await press(stack, body, forged, tenant_id=other)
    assert across.json()["code"] == "approval_not_found"
    # A tenant without a channel answers as a mismatch; an oversized body is not read on.
    assert (await press(stack, body, signed(body), tenant_id="t-nochannel")).status_code == 401
    big = body + b"&pad=" + b"x" * 70_000
    assert (await press(stack, big, signed(big))).status_code == 413

    # Rejecting binds the same way; the message then shows it, and the call never ran.
    rejected = press_body(message, "U0ALICE2", slack, approve=False)
    answered = await press(stack, rejected, signed(rejected))
    assert answered.json()["message"] == "rejected by person:alice"
    await eventually(lambda: slack.updated(channel))
    assert slack.posted(channel)[0]["text"].startswith("Rejected by person:alice")
    assert provider.calls_to("/slack-refused") == []
    assert await status_of(stack, approval["id"]) == "rejected"


async def status_of(stack: Stack, approval_id: str) -> str:
    shown = await stack.http.get(
        f"{stack.url}/v1/approvals/{approval_id}", headers=bearer(stack.api_key)
    )
    status: str = shown.json()["status"]
    return status


async def _channel_of(stack: Stack, tenant_id: str, con: str, secret: str) -> None:
    made = await stack.http.post(
        f"{stack.url}/v1/admin/tenants/{tenant_id}/keys",
        json={"scopes": CHANNEL_KEY_SCOPES},
        headers=ADMIN,
    )
    key = made.json()["api_key"]
    body = {"connection_id": con, "channel": "C0OTHER", "signing_secret": secret}
    put = await stack.http.put(f"{stack.url}/v1/approvals/channel", json=body, headers=bearer(key))
    assert put.status_code == 200, put.text


async def test_channel_from_the_cli_never_shows_its_secret(
    stack: Stack, slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    con = await stack.add_connection("slack", "xoxb-cli", config={"base_url": slack.base_url})
    key = await new_key(stack, CHANNEL_KEY_SCOPES)
    narrow = await new_key(stack, ["policy:write", "approvals:read"])
    monkeypatch.setenv("MOAT_GATEWAY_URL", stack.url)
    runner = CliRunner()

    async def moat(api_key: str, *args: str, stdin: str | None = None) -> Result:
        argv = ["approvals", "channel", *args, "--api-key", api_key]
        return await asyncio.to_thread(runner.invoke, cli, argv, input=stdin)

    made = await moat(key, "set", con, "C0CLI", stdin=SECRET + "\n")
    assert made.exit_code == 0, made.output
    shown = await moat(key, "show")
    assert shown.exit_code == 0 and "C0CLI" in shown.output and con in shown.output
    assert SECRET not in made.output + shown.output
    assert f"/v1/slack/interactions/{stack.tenant_id}" in shown.output
    # Least privilege: a key that could not post the messages itself cannot set them up.
    refused = await moat(narrow, "set", con, "C0CLI", stdin=SECRET)
    assert refused.exit_code == 1 and "scope_missing" in refused.output
    assert (await moat(key, "clear")).exit_code == 0
    gone = await moat(key, "show")
    assert gone.exit_code == 1 and "not_found" in gone.output


async def test_expiry_shown_and_a_revoked_key_announces_nothing(
    stack: Stack, provider: FakeProvider, slack: FakeSlack
) -> None:
    channel, key = await configure(stack, slack)
    await put_policy(stack, key, strict(ttl=1))
    await budgets_on(stack)
    url = provider.script("/slack-expire", Step(201, {"ok": True}))
    await pending(stack, url, "slack-expire")
    await eventually(lambda: slack.posted(channel))
    await eventually(lambda: slack.updated(channel))
    assert slack.posted(channel)[0]["text"].startswith("Expired by moat")

    # The announcements carry the authority of the key that set the channel: revoked, the
    # next approval is not posted.
    listed = await stack.http.get(
        f"{stack.url}/v1/admin/tenants/{stack.tenant_id}/keys", headers=ADMIN
    )
    key_id = next(k["id"] for k in listed.json()["items"] if key.startswith(k["prefix"]))
    revoked = await stack.http.post(f"{stack.url}/v1/admin/keys/{key_id}/revoke", headers=ADMIN)
    assert revoked.status_code == 200, revoked.text
    second = await pending(stack, url, "slack-expire-2")
    announced = await stack.client.get_workflow_handle(
        announce_workflow_id(stack.tenant_id, second["approval"]["id"], "requested"),
        result_type=AnnounceResult,
    ).result()
    assert (announced.skipped or "").startswith("key_revoked"), announced
    assert len(slack.posted(channel)) == 1
