"""Policy documents: versioned per tenant (tenant and admin routes), every decision records
the version it used, and each mode does what it says: ``standard`` enforces, ``audit``
records ``would_deny`` and proceeds, ``strict`` without an approval rule runs as
``standard``, ``bypass`` only for a tenant the admin allowed it, and recorded as such."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from store.models import PolicyDecisionRow
from tests.support.stack import ADMIN_KEY, Stack

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def new_key(stack: Stack, scopes: list[str]) -> str:
    made = await stack.http.post(
        f"{stack.url}/v1/admin/tenants/{stack.tenant_id}/keys",
        json={"scopes": scopes},
        headers=ADMIN,
    )
    assert made.status_code == 201, made.text
    key: str = made.json()["api_key"]
    return key


async def put_policy(stack: Stack, key: str, document: dict[str, Any]) -> dict[str, Any]:
    answer = await stack.http.put(f"{stack.url}/v1/policy", json=document, headers=bearer(key))
    assert answer.status_code == 200, answer.text
    stored: dict[str, Any] = answer.json()
    return stored


async def decision_of(stack: Stack, envelope: dict[str, Any]) -> PolicyDecisionRow:
    async with stack.sessions() as s:
        row = await s.get(PolicyDecisionRow, envelope["receipt"]["policy_decision_id"])
    assert row is not None
    return row


async def test_policy_versions_and_modes(stack: Stack) -> None:
    url = f"{stack.url}/v1/policy"
    first = await stack.http.get(url, headers=bearer(stack.api_key))
    assert first.json()["version"] == 0 and first.json()["mode"] == "standard"

    # Writing needs policy:write; the default key has execute:* only.
    refused = await stack.http.put(url, json={"mode": "audit"}, headers=bearer(stack.api_key))
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "scope_missing"
    writer = await new_key(stack, ["policy:write", "execute:*"])

    budget_zero = {"capability": "demo.echo", "budget": {"limit": 0, "period": "day"}}
    v1 = await put_policy(stack, writer, {"mode": "standard", "rules": [budget_zero]})
    assert v1["version"] == 1 and v1["created_by"].startswith("key:")
    denied = await stack.execute("demo.echo", {"n": 1}, key="p-1")
    assert denied.status_code == 403 and denied.json()["error"]["code"] == "budget_exceeded"
    row = await decision_of(stack, denied.json())
    assert (row.decision, row.rule_hit, row.policy_version) == ("deny", "BUDGET_EXCEEDED", 1)

    # audit: evaluated and recorded as would_deny, with its rule; the call proceeds.
    v2 = await put_policy(stack, writer, {"mode": "audit", "rules": [budget_zero]})
    assert v2["version"] == 2
    audited = await stack.execute("demo.echo", {"n": 2}, key="p-2")
    assert audited.status_code == 200, audited.text
    row = await decision_of(stack, audited.json())
    assert (row.decision, row.rule_hit, row.policy_version) == ("would_deny", "BUDGET_EXCEEDED", 2)
    assert "budget 0 per day" in row.reason

    # strict without an approval rule enforces like standard.
    await put_policy(stack, writer, {"mode": "strict", "rules": [budget_zero]})
    strict = await stack.execute("demo.echo", {"n": 3}, key="p-3")
    assert strict.status_code == 403 and strict.json()["error"]["code"] == "budget_exceeded"

    # bypass: refused until the admin allows it, then every execution is recorded BYPASSED.
    refused = await stack.http.put(url, json={"mode": "bypass"}, headers=bearer(writer))
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "bypass_not_allowed"
    tenant_url = f"{stack.url}/v1/admin/tenants/{stack.tenant_id}"
    allowed = await stack.http.patch(tenant_url, json={"allow_bypass": True}, headers=ADMIN)
    assert allowed.status_code == 200 and allowed.json()["allow_bypass"] is True
    v4 = await put_policy(stack, writer, {"mode": "bypass", "rules": [budget_zero]})
    bypassed = await stack.execute("demo.echo", {"n": 4}, key="p-4")
    assert bypassed.status_code == 200, bypassed.text
    row = await decision_of(stack, bypassed.json())
    assert (row.mode, row.rule_hit, row.policy_version) == ("bypass", "BYPASSED", v4["version"])
    # Taken back: the tenant is held to standard although its document says bypass.
    await stack.http.patch(tenant_url, json={"allow_bypass": False}, headers=ADMIN)
    held = await stack.execute("demo.echo", {"n": 5}, key="p-5")
    assert held.status_code == 403 and held.json()["error"]["code"] == "budget_exceeded"

    # The admin reads and writes the same document; old versions stay readable.
    admin_put = await stack.http.put(
        f"{tenant_url}/policy", json={"mode": "standard"}, headers=ADMIN
    )
    assert admin_put.json()["version"] == 5 and admin_put.json()["created_by"] == "admin"
    assert (await stack.http.get(f"{tenant_url}/policy", headers=ADMIN)).json()["version"] == 5
    old = await stack.http.get(f"{url}/versions/1", headers=bearer(stack.api_key))
    assert old.json()["rules"][0]["budget"] == {"limit": 0, "period": "day"}
    history = await stack.http.get(f"{url}/versions", headers=bearer(stack.api_key))
    assert [v["version"] for v in history.json()["items"]] == [5, 4, 3, 2, 1]
    missing = await stack.http.get(f"{url}/versions/9", headers=bearer(stack.api_key))
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "policy_version_not_found"

    # A pattern cannot carry a budget.
    bad = await stack.http.put(
        url,
        json={"rules": [{"capability": "demo.*", "budget": {"limit": 1, "period": "day"}}]},
        headers=bearer(writer),
    )
    assert bad.status_code == 400, bad.text
    async with stack.sessions() as s:
        versions = (
            await s.execute(
                select(PolicyDecisionRow.policy_version).where(
                    PolicyDecisionRow.tenant_id == stack.tenant_id
                )
            )
        ).scalars()
        assert set(versions) == {1, 2, 3, 4}
