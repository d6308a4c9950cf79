"""API key scopes: keys carry them (default ``execute:*``), the admin API and the CLI set
them, the policy step enforces a capability's in ``standard`` mode (403 ``scope_missing``,
rule hit ``SCOPE_MISSING``, a receipt) and only records them in ``audit`` mode; routes
require theirs through one dependency."""

from __future__ import annotations

import json
import uuid
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from fastapi import Depends, FastAPI
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from typer.testing import CliRunner

from schemas.capabilities import CapabilityCatalog
from schemas.run import ExecuteWorkflowInput
from schemas.scopes import capability_scopes, grants, missing_scopes
from schemas.start import StartClaims
from starter.cli import app as cli
from starter.gateway.deps import requires_scope
from starter.gateway.errors import install
from store.keyrings.start import StartKeyring
from store.models import PolicyDecisionRow
from tests.support.stack import ADMIN_KEY, Stack, direct_start, policy_input

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


async def new_key(stack: Stack, tenant_id: str, scopes: list[str] | None) -> dict[str, Any]:
    body: dict[str, Any] = {"name": "scoped"} if scopes is None else {"scopes": scopes}
    made = await stack.http.post(
        f"{stack.url}/v1/admin/tenants/{tenant_id}/keys", json=body, headers=ADMIN
    )
    assert made.status_code == 201, made.text
    created: dict[str, Any] = made.json()
    return created


def test_scope_patterns() -> None:
    assert grants("execute:*", "execute:slack.post_message")
    assert grants("execute:slack.*", "execute:slack.post_message")
    assert grants("*", "policy:write")
    assert not grants("execute:slack.*", "execute:github.create_issue")
    assert not grants("execute:http", "execute:http.request")
    assert not grants("policy:read", "policy:write")
    assert missing_scopes(["execute:*"], ["execute:x", "policy:write"]) == ["policy:write"]
    assert capability_scopes("a.b", ("x:y", "execute:a.b")) == ["execute:a.b", "x:y"]


async def test_a_key_without_the_capabilitys_scope_is_refused_with_a_receipt(
    stack: Stack,
) -> None:
    default = await new_key(stack, stack.tenant_id, None)
    assert default["scopes"] == ["execute:*", "outputs:read"]
    narrow = await new_key(stack, stack.tenant_id, ["execute:http.*", "connections:write"])
    assert narrow["scopes"] == ["execute:http.*", "connections:write"]
    listed = await stack.http.get(
        f"{stack.url}/v1/admin/tenants/{stack.tenant_id}/keys", headers=ADMIN
    )
    assert {k["id"]: k["scopes"] for k in listed.json()["items"]}[narrow["id"]] == narrow["scopes"]

    refused = await stack.execute("demo.echo", {"n": 1}, api_key=narrow["api_key"], key="s-1")
    assert refused.status_code == 403, refused.text
    envelope = refused.json()
    assert envelope["status"] == "failed" and envelope["error"]["code"] == "scope_missing"
    assert envelope["receipt"]["status"] == "policy_denied"
    async with stack.sessions() as s:
        decision = await s.get(PolicyDecisionRow, envelope["receipt"]["policy_decision_id"])
    assert decision is not None
    assert (decision.decision, decision.rule_hit) == ("deny", "SCOPE_MISSING")
    assert "execute:demo.echo" in decision.reason

    allowed = await stack.execute("demo.echo", {"n": 1}, api_key=default["api_key"], key="s-2")
    assert allowed.status_code == 200, allowed.text

    # In audit mode the missing scope is recorded, and the execution runs.
    made = await stack.http.post(
        f"{stack.url}/v1/admin/tenants",
        json={"name": f"audit-{uuid.uuid4().hex[:8]}", "policy_mode": "audit"},
        headers=ADMIN,
    )
    tenant_id = made.json()["tenant"]["id"]
    narrow = await new_key(stack, tenant_id, ["execute:http.request"])
    ran = await stack.execute("demo.echo", {"n": 2}, api_key=narrow["api_key"])
    assert ran.status_code == 200, ran.text
    async with stack.sessions() as s:
        decision = (
            await s.execute(
                select(PolicyDecisionRow).where(PolicyDecisionRow.tenant_id == tenant_id)
            )
        ).scalar_one()
    assert (decision.decision, decision.rule_hit) == ("would_deny", "SCOPE_MISSING")


async def test_a_route_requires_its_scope(
    stack: Stack, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    """``requires_scope`` as another room's routes use it; malformed scopes are refused."""
    for scopes in ([], ["execute"], ["Execute:*"], ["execute:a b"], ["x:*y"]):
        made = await stack.http.post(
            f"{stack.url}/v1/admin/tenants/{stack.tenant_id}/keys",
            json={"scopes": scopes},
            headers=ADMIN,
        )
        assert made.status_code == 400, (scopes, made.text)
        assert made.json()["error"]["code"] == "schema_validation_failed"

    writer = await new_key(stack, stack.tenant_id, ["policy:*"])
    app = FastAPI()
    install(app)
    # Only the sessions are used by the dependency.
    app.state.deps = SimpleNamespace(sessions=app_sessions)

    @app.post("/policy", dependencies=[Depends(requires_scope("policy:write"))])
    async def write() -> dict[str, bool]:
        return {"ok": True}

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        ok = await c.post("/policy", headers={"Authorization": f"Bearer {writer['api_key']}"})
        assert ok.status_code == 200, ok.text
        refused = await c.post("/policy", headers={"Authorization": f"Bearer {stack.api_key}"})
        assert refused.status_code == 403
        error = refused.json()["error"]
        assert error["code"] == "scope_missing"
        assert error["details"]["missing_scopes"] == ["policy:write"]
        anonymous = await c.post("/policy")
        assert anonymous.status_code == 401


def test_cli_creates_keys_with_scopes(base_settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOAT_DATABASE_URL", base_settings.database_url)
    monkeypatch.setenv("MOAT_HOME", str(base_settings.home))
    runner = CliRunner()
    name = f"scopes-{uuid.uuid4().hex[:8]}"
    assert runner.invoke(cli, ["tenant", "create", name]).exit_code == 0
    made = runner.invoke(
        cli,
        ["api-key", "create", name, "--scope", "execute:demo.echo", "--scope", "policy:write"],
    )
    assert made.exit_code == 0, made.output
    assert "execute:demo.echo policy:write" in made.output
    listed = json.loads(runner.invoke(cli, ["api-key", "list", name, "--json"]).output)
    assert sorted(k["scopes"] for k in listed) == [
        ["execute:*", "outputs:read"],
        ["execute:demo.echo", "policy:write"],
    ]
    bad = runner.invoke(cli, ["api-key", "create", name, "--scope", "nope"])
    assert bad.exit_code == 1 and "Not scopes" in bad.output


def test_the_gateway_signs_the_callers_scopes() -> None:
    """A start's scopes are among what the gateway vouches for: widening or dropping them
    breaks the signature; a start without scopes (older runs) is still checked as before."""
    ring = StartKeyring({"k": b"0" * 32}, "k")
    spec = CapabilityCatalog().get("demo.echo")
    assert spec is not None
    narrow = direct_start("t1", "key", spec, {}).model_copy(update={"scopes": ["execute:x"]})
    signed = ring.signed(narrow, "wf")
    assert signed.start_signature.startswith("v3.")

    def refusal(req: ExecuteWorkflowInput) -> str | None:
        inp = policy_input(req)
        return ring.refusal(StartClaims.of_policy(inp), inp.start_signature)

    assert refusal(signed) is None
    assert refusal(signed.model_copy(update={"scopes": ["*"]})) == "mismatch"
    assert refusal(signed.model_copy(update={"scopes": None})) == "mismatch"

    def signed_before_v3(req: ExecuteWorkflowInput) -> ExecuteWorkflowInput:
        # As gateways signed before the requesting key was among the claims.
        claims = StartClaims.of_start(req, "wf").model_copy(update={"api_key_id": None})
        return req.model_copy(update={"start_signature": ring.sign(claims)})

    v2 = signed_before_v3(narrow)
    assert v2.start_signature.startswith("v2.") and refusal(v2) is None
    assert refusal(v2.model_copy(update={"scopes": ["*"]})) == "mismatch"
    assert refusal(v2.model_copy(update={"scopes": None})) == "malformed"
    older = signed_before_v3(narrow.model_copy(update={"scopes": None}))
    assert older.start_signature.startswith("v1.") and refusal(older) is None
