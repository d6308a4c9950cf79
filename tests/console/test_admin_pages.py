"""The tenant-admin pages (connections, webhooks, dead letters, trust, policy): each shows
what the API shows the same key, writes through the same services with the same scopes,
refuses a form without the session's CSRF token, and never echoes a connection's secret,
in any answer's body or headers (success, refusal or redirect)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from starter.gateway.console.auth import SESSION_COOKIE
from starter.service import console_sessions
from store import tenancy
from store.models import PersonRow
from tests.console.admin_seed import delivery_dead_letter, trust_minutes
from tests.gateway.test_policy import bearer, new_key
from tests.support.console import sign_in
from tests.support.stack import Stack

SECRET = "s3cr3t-Never-Echoed-0f9a8b7c6d5e"
ROTATED = "r0tated-Never-Echoed-1a2b3c4d5e6f"


class Recorder:
    """A signed-in browser's HTTP: every answer kept, to search them all."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http
        self.answers: list[httpx.Response] = []
        self.csrf = ""

    async def get(self, path: str) -> httpx.Response:
        answer = await self.http.get(path)
        self.answers.append(answer)
        return answer

    async def post(self, path: str, data: dict[str, str], *, csrf: bool = True) -> httpx.Response:
        form = {"csrf_token": self.csrf, **data} if csrf else data
        answer = await self.http.post(path, data=form)
        self.answers.append(answer)
        return answer

    def assert_never_shows(self, *secrets: str) -> None:
        assert self.answers
        for answer in self.answers:
            for secret in secrets:
                assert secret not in answer.text, (answer.url, answer.status_code)
                for name, value in answer.headers.multi_items():
                    assert secret not in value, (answer.url, name)
                assert secret not in str(answer.url)


@pytest.fixture
async def signed_in(stack: Stack) -> AsyncIterator[object]:
    clients: list[httpx.AsyncClient] = []

    async def open_with(key: str) -> Recorder:
        http = httpx.AsyncClient(base_url=stack.url, timeout=30)
        clients.append(http)
        recorder = Recorder(http)
        recorder.csrf = await sign_in(http, stack.url, key)
        return recorder

    yield open_with
    for http in clients:
        await http.aclose()


async def test_a_connection_secret_is_never_echoed(stack: Stack, signed_in: object) -> None:
    key = await new_key(stack, ["connections:write"])
    browser = await signed_in(key)  # type: ignore[operator]
    listed = await browser.get("/console/connections")
    assert listed.status_code == 200 and "http_bearer" in listed.text and "smtp" in listed.text
    form = await browser.get("/console/connections/new?type=http_bearer")
    assert 'type="password"' in form.text and 'autocomplete="off"' in form.text
    assert 'name="config.allowed_origins"' in form.text

    # Refused (no origin for an http_bearer secret): the form again, the secret field empty.
    fields = {"type": "http_bearer", "name": "billing api", "secret": SECRET}
    refused = await browser.post("/console/connections", fields)
    assert refused.status_code == 400, refused.text
    assert "schema_validation_failed" in refused.text and "billing api" in refused.text
    assert "must name where its secret may be sent" in refused.text

    made = await browser.post(
        "/console/connections", {**fields, "config.base_url": "https://api.example.com/v2"}
    )
    assert made.status_code == 303, made.text
    connection_id = made.headers["location"].rsplit("=", 1)[1]
    shown = await browser.get(made.headers["location"])
    assert connection_id in shown.text and "https://api.example.com/v2" in shown.text
    assert "<code>https://api.example.com</code>" in shown.text  # the origin it may go to
    api = await stack.http.get(f"{stack.url}/v1/connections/{connection_id}", headers=bearer(key))
    assert api.json()["fingerprint"] in shown.text

    bad = await browser.post(
        f"/console/connections/{connection_id}/rotate", {"secret": f"{ROTATED} x"}
    )
    assert bad.status_code == 400 and "secret: String should match pattern" in bad.text
    await browser.get(f"/console/connections/{connection_id}/rotate")
    rotated = await browser.post(
        f"/console/connections/{connection_id}/rotate", {"secret": ROTATED}
    )
    assert rotated.status_code == 303
    await browser.get(rotated.headers["location"])
    confirm = await browser.get(f"/console/connections/{connection_id}/revoke")
    assert "A revocation is final" in confirm.text
    revoked = await browser.post(f"/console/connections/{connection_id}/revoke", {})
    assert revoked.status_code == 303
    after = await browser.get(revoked.headers["location"])
    assert "revoked" in after.text and "Rotate the secret" not in after.text
    gone = await stack.http.get(f"{stack.url}/v1/connections/{connection_id}", headers=bearer(key))
    assert gone.json()["error"]["code"] == "connection_gone"
    browser.assert_never_shows(SECRET, ROTATED, f"{ROTATED} x")


async def test_writes_need_the_api_scopes_and_the_csrf_token(
    stack: Stack, signed_in: object
) -> None:
    subscription = await stack.http.post(
        f"{stack.url}/v1/webhooks",
        json={"url": "https://hooks.example.com/a", "events": ["execution.failed"]},
        headers=bearer(stack.api_key),
    )
    letter = await delivery_dead_letter(stack, subscription.json()["id"])
    reader = await signed_in(await new_key(stack, ["execute:*"]))  # type: ignore[operator]
    for path in ("/console/connections", "/console/policy", "/console/dead-letters"):
        assert (await reader.get(path)).status_code == 200
    assert "connections:write</code>; this session does not hold it" in reader.answers[0].text
    existing = await stack.add_connection("github", "x" * 30)
    writes = {
        "/console/connections": {"type": "github", "name": "gh", "secret": SECRET},
        f"/console/connections/{existing}/rotate": {"secret": SECRET},
        f"/console/connections/{existing}/revoke": {},
        "/console/policy/mode": {"mode": "strict"},
        "/console/policy": {"document": '{"mode": "strict"}'},
        f"/console/dead-letters/{letter}/requeue": {"note": "endpoint fixed"},
        f"/console/dead-letters/{letter}/resolve": {"note": "dropped"},
    }
    for path, data in writes.items():
        answer = await reader.post(path, data)
        assert answer.status_code == 403 and "scope_missing" in answer.text, path
    assert (await reader.get("/console/connections/new?type=github")).status_code == 403

    writer = await signed_in(  # type: ignore[operator]
        await new_key(stack, ["policy:write", "connections:write", "dead_letters:write"])
    )
    for path, data in writes.items():
        for csrf in ("", "not-the-token"):
            answer = await writer.post(path, {**data, "csrf_token": csrf}, csrf=False)
            assert answer.status_code == 403 and "security token" in answer.text, path
        answer = await writer.post(path, data, csrf=False)
        assert answer.status_code == 403, path
    policy = await stack.http.get(f"{stack.url}/v1/policy", headers=bearer(stack.api_key))
    assert policy.json()["version"] == 0
    listed = await stack.http.get(f"{stack.url}/v1/connections", headers=bearer(stack.api_key))
    [kept] = listed.json()["items"]
    assert (kept["id"], kept["rotated_at"], kept["revoked_at"]) == (existing, None, None)
    shown = await stack.http.get(
        f"{stack.url}/v1/dead-letters/{letter}", headers=bearer(stack.api_key)
    )
    assert shown.json()["status"] == "open"
    reader.assert_never_shows(SECRET)
    writer.assert_never_shows(SECRET)


async def test_policy_mode_document_history_and_diff(stack: Stack, signed_in: object) -> None:
    browser = await signed_in(await new_key(stack, ["policy:write"]))  # type: ignore[operator]
    strict = await browser.post("/console/policy/mode", {"mode": "strict"})
    assert strict.status_code == 303 and strict.headers["location"].endswith("saved=1")
    api = await stack.http.get(f"{stack.url}/v1/policy", headers=bearer(stack.api_key))
    assert (api.json()["mode"], api.json()["version"]) == ("strict", 1)
    assert api.json()["created_by"].startswith("key:")

    document = '{"mode": "strict", "rules": [{"capability": "demo.echo", "approvers": ["nobody"]}]}'
    refused = await browser.post("/console/policy", {"document": document})
    assert refused.status_code == 400 and "schema_validation_failed" in refused.text
    assert "rules[0].approvers[0]: String should match pattern" in refused.text
    assert "&#34;nobody&#34;" in refused.text  # the typed document is kept, escaped
    not_json = await browser.post("/console/policy", {"document": '{"mode": '})
    assert not_json.status_code == 400 and "bad_json" in not_json.text
    bypass = await browser.post("/console/policy/mode", {"mode": "bypass"})
    assert bypass.status_code == 403 and "bypass_not_allowed" in bypass.text

    rule = '{"mode": "strict", "rules": [{"capability": "demo.echo", "requires_approval": true}]}'
    stored = await browser.post("/console/policy", {"document": rule})
    assert stored.status_code == 303 and stored.headers["location"].endswith("saved=2")
    page = await browser.get(stored.headers["location"])
    assert "Version 2 stored" in page.text
    assert '<tr class="diff-added"><td>+ added</td>' in page.text
    assert "Version 1 → version 2" in page.text
    versions = await stack.http.get(
        f"{stack.url}/v1/policy/versions", headers=bearer(stack.api_key)
    )
    for version in versions.json()["items"]:
        assert version["created_by"] in page.text
    chosen = await browser.get("/console/policy?old=0&new=2")
    assert "Version 0 → version 2" in chosen.text
    assert '<tr class="diff-removed"><td>- removed</td>' in chosen.text


async def test_dead_letters_webhooks_and_trust(stack: Stack, signed_in: object) -> None:
    made = await stack.http.post(
        f"{stack.url}/v1/webhooks",
        json={"url": "https://hooks.example.com/b", "events": ["execution.failed"]},
        headers=bearer(stack.api_key),
    )
    first = await delivery_dead_letter(stack, made.json()["id"])
    second = await delivery_dead_letter(stack, made.json()["id"])
    await trust_minutes(stack, "demo.echo", [1.0, 0.5, 0.75, 0.9])
    browser = await signed_in(stack.api_key)  # type: ignore[operator]

    hooks = await browser.get("/console/webhooks")
    assert "https://hooks.example.com/b" in hooks.text
    assert made.json()["secret"] not in hooks.text and "whsec_" not in hooks.text

    letters = await browser.get("/console/dead-letters")
    assert first in letters.text and "retries_exhausted" in letters.text
    silent = await browser.post(f"/console/dead-letters/{first}/requeue", {"note": "  "})
    assert silent.status_code == 400 and "a statement is required" in silent.text
    statement = "The endpoint answers 200 again (checked at 10:02)."
    requeued = await browser.post(f"/console/dead-letters/{first}/requeue", {"note": statement})
    assert requeued.status_code == 303, requeued.text
    resolved = await browser.post(f"/console/dead-letters/{second}/resolve", {"note": "dropped"})
    assert resolved.status_code == 303, resolved.text
    api = await stack.http.get(
        f"{stack.url}/v1/dead-letters/{first}", headers=bearer(stack.api_key)
    )
    key_id = stack.api_key.split("_")[1]
    assert (api.json()["status"], api.json()["note"]) == ("requeued", statement)
    assert api.json()["closed_by"] == key_id
    closed = await browser.get("/console/dead-letters?status=all")
    assert statement in closed.text and "resolved" in closed.text
    again = await browser.post(f"/console/dead-letters/{first}/requeue", {"note": statement})
    assert again.status_code == 409 and "dead_letter_closed" in again.text

    trust = await browser.get("/console/trust")
    assert trust.status_code == 200
    report = await stack.http.get(f"{stack.url}/v1/trust", headers=bearer(stack.api_key))
    [score] = report.json()["scores"]
    rate = score["real"]["success_rate"]
    assert f"{rate * 100:.1f} %" in trust.text
    assert "<polyline" in trust.text and "<svg" in trust.text and "style=" not in trust.text
    assert "Success rate in 4 of 24 parts" in trust.text and "provider_error" in trust.text
    assert "synthetic" in trust.text


async def test_a_person_stores_a_policy_under_their_name(stack: Stack) -> None:
    """A person (signed in with OpenID Connect) is named as the author of what they store;
    a dead letter's requeue, recorded against an API key, needs a key's session."""
    async with stack.sessions.begin() as s:
        await tenancy.set_tenant(s, stack.tenant_id)
        s.add(PersonRow(tenant_id=stack.tenant_id, handle="ana", created_by="admin"))
    opened = await console_sessions.open_for_person(
        stack.sessions,
        tenant_id=stack.tenant_id,
        handle="ana",
        scopes=["policy:write", "dead_letters:write"],
        lifetime_seconds=600,
    )
    made = await stack.http.post(
        f"{stack.url}/v1/webhooks",
        json={"url": "https://hooks.example.com/p", "events": ["execution.failed"]},
        headers=bearer(stack.api_key),
    )
    letter = await delivery_dead_letter(stack, made.json()["id"])
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as http:
        http.cookies.set(SESSION_COOKIE, opened.cookie, path="/console")
        browser = Recorder(http)
        browser.csrf = opened.principal.csrf_token
        strict = await browser.post("/console/policy/mode", {"mode": "strict"})
        assert strict.status_code == 303, strict.text
        refused = await browser.post(f"/console/dead-letters/{letter}/requeue", {"note": "ok"})
        assert refused.status_code == 403 and "sign in with an API key" in refused.text
    api = await stack.http.get(f"{stack.url}/v1/policy", headers=bearer(stack.api_key))
    assert (api.json()["mode"], api.json()["created_by"]) == ("strict", "person:ana")
