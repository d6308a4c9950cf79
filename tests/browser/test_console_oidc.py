"""Signing in to the console with OpenID Connect in Chromium, as a person does: the
sign-in page offers it (and passes axe-core without a serious or critical violation), the
person fills the provider's own login form (a real OpenID provider, authlib's, on
loopback), lands in the console as ``person:<handle>`` and approves a held call there; the
approval and the run's signed manifest name the person as the approver."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import BrowserContext
from pydantic import SecretStr
from temporalio.testing import WorkflowEnvironment

from schemas.settings import MoatSettings
from starter.devstack.providers.webhook import FakeWebhookReceiver
from tests.support.console import ThreadStack, thread_stack
from tests.support.oidc import OpenIDProvider, User

SHOW_MS = 20_000


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeWebhookReceiver]:
    with FakeWebhookReceiver() as receiver:
        yield receiver


@pytest.fixture(scope="module")
def idp() -> Iterator[OpenIDProvider]:
    with OpenIDProvider() as provider:
        yield provider


@pytest.fixture(scope="module")
def moat(
    moat_settings: MoatSettings,
    moat_temporal: WorkflowEnvironment,
    fake: FakeWebhookReceiver,
    idp: OpenIDProvider,
) -> Iterator[ThreadStack]:
    """A stack whose console signs people in at ``idp``, allowed to call the fake, its
    tenant's policy asking approval for http.*."""
    client = idp.add_client()
    with thread_stack(
        moat_settings,
        moat_temporal,
        http_allow_hosts=[fake.allow_entry],
        console_oidc_issuer=idp.issuer,
        console_oidc_client_id=client.client_id,
        console_oidc_client_secret=SecretStr(client.client_secret),
    ) as s:
        client.redirect_uris.append(f"{s.url}/console/oidc/callback")
        rules = [{"capability": "http.*", "requires_approval": True}]
        call(s, "PUT", "/v1/policy", ["policy:write"], {"mode": "strict", "rules": rules})
        yield s


@pytest.fixture(scope="module")
def ada(moat: ThreadStack, idp: OpenIDProvider) -> User:
    """A person of the tenant who may decide approvals, signing in at ``idp``."""
    user = idp.add_user("ada", "Ada Lovelace")
    person = {
        "display_name": "Ada Lovelace",
        "scopes": ["approvals:read", "approvals:write"],
        "oidc_issuer": idp.issuer,
        "oidc_subject": user.subject,
    }
    call(moat, "PUT", "/v1/people/ada", ["people:write", "approvals:*"], person)
    return user


def call(moat: ThreadStack, method: str, path: str, scopes: list[str], body: Any = None) -> Any:
    key = moat.new_key(scopes) if scopes else moat.stack.api_key

    async def send() -> Any:
        answer = await moat.stack.http.request(
            method, f"{moat.url}{path}", json=body, headers={"Authorization": f"Bearer {key}"}
        )
        assert answer.status_code < 300, answer.text
        return answer.json()

    return moat.run(send())


def manifest_of(moat: ThreadStack, receipt_id: str) -> dict[str, Any]:
    """The run's signed manifest, once the finished run has written it."""
    key = moat.new_key(["outputs:read"])

    async def read() -> dict[str, Any]:
        url = f"{moat.url}/v1/executions/{receipt_id}/manifest"
        for _ in range(100):
            answer = await moat.stack.http.get(url, headers={"Authorization": f"Bearer {key}"})
            if answer.status_code == 200:
                found: dict[str, Any] = json.loads(answer.content)
                return found
            await asyncio.sleep(0.1)
        raise AssertionError(f"no manifest: {answer.status_code} {answer.text}")

    return moat.run(read())


def test_a_person_signs_in_with_oidc_and_approves(
    browser: BrowserContext,
    moat: ThreadStack,
    idp: OpenIDProvider,
    ada: User,
    fake: FakeWebhookReceiver,
) -> None:
    target = {"method": "POST", "url": f"{fake.base_url}/oidc", "json": {"text": "ship it"}}
    target["headers"] = {"webhook-id": f"msg_{uuid.uuid4().hex}"}
    held = moat.run(moat.stack.execute("http.request", target, key="oidc-1"))
    assert held.status_code == 202, held.text
    envelope = held.json()
    approval = envelope["approval"]

    page = browser.new_page()
    try:
        page.goto(f"{moat.url}/console/sign-in?next=/console/approvals")
        violations = Axe().run(page).response["violations"]
        serious = [v["id"] for v in violations if v.get("impact") in ("serious", "critical")]
        assert serious == [], serious
        page.get_by_label("Tenant").fill(moat.stack.tenant_id)
        page.get_by_role("button", name="Sign in with OpenID Connect").click()
        # The provider's own login form.
        page.get_by_label("User").fill("ada")
        page.get_by_label("Password").fill(ada.password)
        page.get_by_role("button", name="Sign in").click()
        try:
            page.wait_for_url(f"{moat.url}/console/approvals", timeout=SHOW_MS)
        except Exception:
            raise AssertionError(f"{page.url} shows:\n{page.inner_text('body')}") from None
        assert "person:ada" in page.inner_text("header")

        card = f"article#{approval['id']}"
        page.locator(card).wait_for(timeout=SHOW_MS)
        page.locator(f"#comment-{approval['id']}").fill("approved by Ada")
        page.locator(f"{card} button[value=approve]").click()
        page.get_by_text(f"Approval {approval['id']} approved.").wait_for(timeout=SHOW_MS)
    finally:
        page.close()

    decided = call(moat, "GET", f"/v1/approvals/{approval['id']}", [])
    assert (decided["status"], decided["decided_by"]) == ("approved", "person:ada")
    manifest = manifest_of(moat, envelope["receipt_id"])
    assert [a["approver"] for a in manifest["approvals"]] == ["person:ada"], manifest
    assert [d.path for d in fake.deliveries if d.path == "/oidc"] == ["/oidc"]
