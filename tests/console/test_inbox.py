"""The approvals inbox over HTTP: a waiting call shown with its digest, policy version,
expiry and what redaction hid; a decision refused (wrong CSRF token, another digest, the
requester approving its own call, a stale policy) changes nothing and says why in words;
the approver's decision runs the call exactly once and is listed with who and when."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from schemas.scopes import DEFAULT_SCOPES
from tests.console.test_frame import assert_console_headers
from tests.gateway.test_approvals import call, finished, pending, setup, strict
from tests.gateway.test_policy import new_key, put_policy
from tests.plans.support import post_plan, until_done
from tests.support.console import sign_in
from tests.support.fakes import FakeProvider, Step
from tests.support.stack import Stack

INBOX = "/console/approvals"


@pytest.fixture
async def approver(stack: Stack) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    """A browser signed in with a key that may read and decide approvals."""
    key = await new_key(stack, ["approvals:read", "approvals:write"])
    async with httpx.AsyncClient(base_url=stack.url, timeout=60) as http:
        yield http, await sign_in(http, stack.url, key)


async def test_the_inbox_decides_exactly_what_it_showed(
    stack: Stack, provider: FakeProvider, approver: tuple[httpx.AsyncClient, str]
) -> None:
    http, csrf = approver
    url = await setup(stack, provider, "/inbox")
    requester = await new_key(stack, [*DEFAULT_SCOPES, "approvals:read", "approvals:write"])
    answer = await stack.execute("http.request", call(url), key="inbox-1", api_key=requester)
    assert answer.status_code == 202, answer.text
    envelope = answer.json()
    approval = envelope["approval"]

    shown = await http.get(INBOX)
    assert shown.status_code == 200
    assert_console_headers(shown)
    for text in (approval["id"], approval["input_hash"], "http.request", "json.api_token"):
        assert text in shown.text, text
    assert "[REDACTED]" in shown.text and "s3cret" not in shown.text
    assert 'name="policy_version" value="1"' in shown.text
    decide = f"{INBOX}/{approval['id']}/decide"
    form = {
        "csrf_token": csrf,
        "input_hash": approval["input_hash"],
        "policy_version": "1",
        "action": "approve",
        "comment": "checked in the console",
    }

    refused = await http.post(decide, data=form | {"csrf_token": "nope"})
    assert refused.status_code == 403 and "nothing was" in refused.text.lower()
    mismatch = await http.post(decide, data=form | {"input_hash": "sha256:" + "1" * 64})
    assert mismatch.status_code == 409
    assert "no longer the call this page showed" in mismatch.text
    assert "approval_mismatch" in mismatch.text
    async with httpx.AsyncClient(base_url=stack.url, timeout=60) as own:
        own_csrf = await sign_in(own, stack.url, requester)
        itself = await own.post(decide, data=form | {"csrf_token": own_csrf})
    assert itself.status_code == 403 and "you made this call" in itself.text
    assert provider.calls_to("/inbox") == []

    approved = await http.post(decide, data=form)
    assert approved.status_code == 303, approved.text
    after = await http.get(approved.headers["location"])
    assert f"Approval <code>{approval['id']}</code> approved." in after.text
    result = await finished(stack, envelope)
    assert result.receipt is not None and result.receipt.status == "success"
    assert len(provider.calls_to("/inbox")) == 1
    listed = (await http.get(INBOX)).text
    assert "checked in the console" in listed and "No call is waiting" in listed


async def test_a_policy_changed_since_is_refused_as_stale(
    stack: Stack, provider: FakeProvider, approver: tuple[httpx.AsyncClient, str]
) -> None:
    http, csrf = approver
    url = await setup(stack, provider, "/stale")
    approval = (await pending(stack, url, "stale-1"))["approval"]
    shown = await http.get(INBOX)
    assert approval["id"] in shown.text
    writer = await new_key(stack, ["policy:write"])
    await put_policy(stack, writer, strict(ttl=600))
    stale = await http.post(
        f"{INBOX}/{approval['id']}/decide",
        data={
            "csrf_token": csrf,
            "input_hash": approval["input_hash"],
            "policy_version": str(approval["policy_version"]),
            "action": "approve",
        },
    )
    assert stale.status_code == 409 and "policy changed" in stale.text
    assert "approval_stale" in stale.text and provider.calls_to("/stale") == []


async def test_a_plan_waiting_shows_its_steps(
    stack: Stack, provider: FakeProvider, approver: tuple[httpx.AsyncClient, str]
) -> None:
    http, csrf = approver
    writer = await new_key(stack, ["policy:write"])
    await put_policy(stack, writer, strict())
    url = provider.script("/plan-step", Step(201, {"id": 7}))
    plan = {
        "steps": [
            {"id": "post", "capability_id": "http.request", "input": call(url)},
            {
                "id": "note",
                "capability_id": "demo.echo",
                "input": {"seen": "${steps.post.output.body.id}"},
            },
        ]
    }
    answer = await post_plan(stack, plan, key="inbox-plan", wait=10)
    assert answer.status_code == 202, answer.text
    body = answer.json()
    approval = body["approval"]
    shown = (await http.get(INBOX)).text
    card = shown.split(f'id="{approval["id"]}"', 1)[1].split("</article>", 1)[0]
    assert "The plan's steps" in card and "moat.plan" in card
    for text in ("<code>post</code>", "<code>note</code>", "http.request", "demo.echo"):
        assert text in card, text
    assert "steps.post.output.body.id" in card and "s3cret" not in card
    approved = await http.post(
        f"{INBOX}/{approval['id']}/decide",
        data={
            "csrf_token": csrf,
            "input_hash": approval["input_hash"],
            "policy_version": str(approval["policy_version"]),
            "action": "approve",
        },
    )
    assert approved.status_code == 303, approved.text
    assert (await until_done(stack, body["plan_id"]))["status"] == "executed"
    assert len(provider.calls_to("/plan-step")) == 1
