"""The console in Chromium, as a person uses it: signing in by typing an API key; an
approval decided end to end with the keyboard only (the provider then sees exactly one
call); a decision refused in words when the approval changed since the page was shown
(another digest, a policy changed), nothing decided; a session signed out elsewhere landing
on the sign-in page; axe-core finding no serious or critical violation on the sign-in page
and the inbox."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import BrowserContext, Page
from sqlalchemy import update
from temporalio.testing import WorkflowEnvironment

from schemas.settings import MoatSettings
from starter.devstack.providers.webhook import FakeWebhookReceiver
from store.models import ConsoleSessionRow
from tests.support.console import ThreadStack, open_signed_in, thread_stack

INBOX = "/console/approvals"
SHOW_MS = 20_000


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeWebhookReceiver]:
    with FakeWebhookReceiver() as receiver:
        yield receiver


@pytest.fixture(scope="module")
def moat(
    moat_settings: MoatSettings, moat_temporal: WorkflowEnvironment, fake: FakeWebhookReceiver
) -> Iterator[ThreadStack]:
    """The stack, allowed to call the fake; its tenant's policy asks approval for http.*."""
    with thread_stack(moat_settings, moat_temporal, http_allow_hosts=[fake.allow_entry]) as s:
        put_policy(s, ttl=3600)
        yield s


@pytest.fixture(scope="module")
def approver(moat: ThreadStack) -> str:
    """A key that may decide approvals and set policy: not the key that makes the calls."""
    return moat.new_key(["approvals:read", "approvals:write", "policy:write"])


def put_policy(moat: ThreadStack, ttl: int) -> None:
    writer = moat.new_key(["policy:write"])
    document = {
        "mode": "strict",
        "rules": [
            {
                "capability": "http.*",
                "requires_approval": True,
                "approval_ttl_seconds": ttl,
            }
        ],
    }

    async def put() -> None:
        answer = await moat.stack.http.put(
            f"{moat.url}/v1/policy", json=document, headers={"Authorization": f"Bearer {writer}"}
        )
        assert answer.status_code == 200, answer.text

    moat.run(put())


def held_call(moat: ThreadStack, fake: FakeWebhookReceiver, path: str) -> dict[str, Any]:
    """A call the stack's own key makes, held for approval: its 202 envelope."""
    call = {
        "method": "POST",
        "url": f"{fake.base_url}{path}",
        "headers": {"webhook-id": f"msg_{uuid.uuid4().hex}"},
        "json": {"text": "ship it", "api_token": "s3cret-value"},
    }
    answer = moat.run(moat.stack.execute("http.request", call, key=path))
    assert answer.status_code == 202, answer.text
    envelope: dict[str, Any] = answer.json()
    return envelope


def approval_status(moat: ThreadStack, approval_id: str) -> str:
    async def read() -> str:
        answer = await moat.stack.http.get(
            f"{moat.url}/v1/approvals/{approval_id}",
            headers={"Authorization": f"Bearer {moat.stack.api_key}"},
        )
        status: str = answer.json()["status"]
        return status

    return moat.run(read())


def serious(page: Page) -> list[str]:
    found = Axe().run(page).response["violations"]
    return [
        f"{v['id']} ({v['impact']}): {v['help']}"
        for v in found
        if v.get("impact") in ("serious", "critical")
    ]


def tab_to(page: Page, selector: str, most: int = 60) -> None:
    """Press Tab until the element ``selector`` has the focus, as a keyboard user does."""
    target = page.locator(selector)
    for _ in range(most):
        page.keyboard.press("Tab")
        if target.evaluate("element => element === document.activeElement"):
            return
    raise AssertionError(f"Tab never reached {selector}")


def test_sign_in_by_typing_a_key_and_axe_on_the_sign_in_page(
    browser: BrowserContext, moat: ThreadStack
) -> None:
    page = browser.new_page()
    try:
        page.goto(f"{moat.url}/console/sign-in")
        assert serious(page) == []
        page.get_by_label("API key").fill("moat_nokey_wrong")
        page.get_by_role("button", name="Sign in").click()
        page.get_by_text("unknown or revoked").wait_for(timeout=SHOW_MS)
    finally:
        page.close()
    page = open_signed_in(browser, moat.url, moat.stack.api_key)
    try:
        assert moat.stack.tenant_id in page.inner_text("body")
        page.get_by_role("button", name="Sign out").click()
        page.get_by_text("You are signed out").wait_for(timeout=SHOW_MS)
    finally:
        page.close()


def test_an_approval_decided_with_the_keyboard_runs_once(
    browser: BrowserContext, moat: ThreadStack, fake: FakeWebhookReceiver, approver: str
) -> None:
    envelope = held_call(moat, fake, "/e2e")
    approval = envelope["approval"]
    page = open_signed_in(browser, moat.url, approver, INBOX)
    try:
        card = page.locator(f"article#{approval['id']}")
        card.wait_for(timeout=SHOW_MS)
        text = card.inner_text()
        for shown in (approval["input_hash"], "http.request", "json.api_token", "[REDACTED]"):
            assert shown in text, shown
        assert "s3cret-value" not in page.content()
        assert serious(page) == []

        tab_to(page, f"#comment-{approval['id']}")
        page.keyboard.type("approved from the console")
        tab_to(page, f"article#{approval['id']} button[value=approve]", most=2)
        page.keyboard.press("Enter")
        page.get_by_text(f"Approval {approval['id']} approved.").wait_for(timeout=SHOW_MS)
    finally:
        page.close()

    async def done() -> Any:
        handle = moat.stack.client.get_workflow_handle(envelope["workflow_id"])
        return await handle.result()

    moat.run(done())
    assert [d.path for d in fake.deliveries if d.path == "/e2e"] == ["/e2e"]
    assert approval_status(moat, approval["id"]) == "approved"


def test_a_changed_approval_is_refused_in_words(
    browser: BrowserContext, moat: ThreadStack, fake: FakeWebhookReceiver, approver: str
) -> None:
    approval = held_call(moat, fake, "/changed")["approval"]
    page = open_signed_in(browser, moat.url, approver, INBOX)
    try:
        card = f"article#{approval['id']}"
        page.locator(card).wait_for(timeout=SHOW_MS)
        # What the page holds no longer matches the waiting call (another digest).
        page.locator(f"{card} input[name=input_hash]").evaluate(
            "field => { field.value = 'sha256:' + '1'.repeat(64); }"
        )
        page.locator(f"{card} button[value=approve]").click()
        page.get_by_text("no longer the call this page showed").wait_for(timeout=SHOW_MS)
        assert "approval_mismatch" in page.inner_text("#refusal")
        # The policy changes after the page was shown: approving is stale.
        put_policy(moat, ttl=1800)
        page.locator(f"{card} button[value=approve]").click()
        page.get_by_text("the tenant's policy changed").first.wait_for(timeout=SHOW_MS)
        assert "approval_stale" in page.inner_text("#refusal")
    finally:
        page.close()
    assert approval_status(moat, approval["id"]) == "pending"
    assert [d for d in fake.deliveries if d.path == "/changed"] == []


def test_a_session_signed_out_elsewhere_lands_on_sign_in(
    browser: BrowserContext, moat: ThreadStack, approver: str
) -> None:
    page = open_signed_in(browser, moat.url, approver, INBOX)
    try:
        page.get_by_role("heading", name="Approvals").wait_for(timeout=SHOW_MS)

        async def sign_out_everywhere() -> None:
            async with moat.stack.sessions.begin() as session:
                await session.execute(
                    update(ConsoleSessionRow)
                    .where(ConsoleSessionRow.tenant_id == moat.stack.tenant_id)
                    .values(revoked_at=ConsoleSessionRow.created_at)
                )

        moat.run(sign_out_everywhere())
        page.reload()
        page.get_by_text("You are signed out").wait_for(timeout=SHOW_MS)
        assert page.url.startswith(f"{moat.url}/console/sign-in?")
        assert page.get_by_label("API key").is_visible()
    finally:
        page.close()
