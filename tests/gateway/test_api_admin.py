"""Tenants and API keys: the admin HTTP endpoints and the ``moat tenant|key`` commands.

A new user's path: an operator creates a tenant and a key, the key executes, polls and
lists; a revoked key stops working at once.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from starter.cli import app as cli
from store.models import ApiKey
from tests.gateway.test_pagination import every_page
from tests.support.stack import ADMIN_KEY, Stack

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
SVF = "schema_validation_failed"


async def admin(stack: Stack, method: str, path: str, **kwargs: Any) -> Any:
    return await stack.http.request(method, f"{stack.url}/v1/admin{path}", headers=ADMIN, **kwargs)


async def test_new_user_path_over_http(stack: Stack) -> None:
    name = f"acme-{uuid.uuid4().hex[:8]}"
    created = await admin(stack, "POST", "/tenants", json={"name": name, "policy_mode": "audit"})
    assert created.status_code == 201, created.text
    body = created.json()
    tenant_id, key = body["tenant"]["id"], body["api_key"]["api_key"]
    assert body["tenant"]["policy_mode"] == "audit"
    assert body["tenant"]["idempotency_ttl_seconds"] == stack.settings.idempotency_ttl_seconds
    assert key.startswith(body["api_key"]["prefix"]) and key.startswith("moat_")

    executed = await stack.execute("demo.echo", {"hi": 1}, api_key=key)
    assert executed.status_code == 200, executed.text
    listed = await stack.http.get(
        f"{stack.url}/v1/receipts", headers={"Authorization": f"Bearer {key}"}
    )
    assert [r["id"] for r in listed.json()["items"]] == [executed.json()["receipt_id"]]

    tenants = await every_page(stack.http, f"{stack.url}/v1/admin/tenants", ADMIN)
    assert {"id": tenant_id, "name": name} in [{"id": t["id"], "name": t["name"]} for t in tenants]
    assert (await admin(stack, "GET", f"/tenants/{tenant_id}")).json()["name"] == name

    duplicate = await admin(stack, "POST", "/tenants", json={"name": name})
    assert duplicate.status_code == 409 and duplicate.json()["error"]["code"] == "conflict"


async def test_keys_create_list_revoke_over_http(stack: Stack) -> None:
    created = await admin(stack, "POST", f"/tenants/{stack.tenant_id}/keys", json={"name": "bot"})
    assert created.status_code == 201, created.text
    new = created.json()
    assert new["tenant_id"] == stack.tenant_id and new["name"] == "bot"

    listed = (await admin(stack, "GET", f"/tenants/{stack.tenant_id}/keys")).json()["items"]
    assert {k["id"] for k in listed} >= {new["id"]}
    assert all("api_key" not in k and "secret_hash" not in k for k in listed)
    assert new["api_key"] not in json.dumps(listed)

    ok = await stack.execute("demo.echo", {"k": 1}, api_key=new["api_key"])
    assert ok.status_code == 200

    revoked = await admin(stack, "POST", f"/keys/{new['id']}/revoke")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"]
    again = await admin(stack, "POST", f"/keys/{new['id']}/revoke")
    assert again.json()["revoked_at"] == revoked.json()["revoked_at"]

    # At once: the very next request is refused, on every route.
    refused = await stack.execute("demo.echo", {"k": 1}, api_key=new["api_key"])
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthenticated"
    headers = {"Authorization": f"Bearer {new['api_key']}"}
    listing = await stack.http.get(f"{stack.url}/v1/receipts", headers=headers)
    assert listing.status_code == 401
    # The tenant's other key still works.
    assert (await stack.execute("demo.echo", {"k": 2})).status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("GET", "/tenants/ten_doesnotexist0000", None, 404, "tenant_not_found"),
        ("GET", "/tenants/ten_doesnotexist0000/keys", None, 404, "tenant_not_found"),
        ("POST", "/tenants/ten_doesnotexist0000/keys", {}, 404, "tenant_not_found"),
        ("POST", "/keys/nosuchkey/revoke", None, 404, "key_not_found"),
        ("GET", "/tenants/bad%00id", None, 400, "schema_validation_failed"),
        ("POST", "/tenants", {"name": ""}, 400, "schema_validation_failed"),
        ("POST", "/tenants", {"name": "bad\u0000name"}, 400, "schema_validation_failed"),
        ("POST", "/tenants", {"name": "x", "policy_mode": "no"}, 400, "schema_validation_failed"),
        ("POST", "/tenants", {"name": "x", "idempotency_ttl_seconds": 5}, 400, SVF),
        ("POST", "/tenants", "not json", 400, "schema_validation_failed"),
    ],
)  # fmt: skip
async def test_admin_errors(
    stack: Stack, method: str, path: str, body: Any, status: int, code: str
) -> None:
    kwargs = {"content": body} if isinstance(body, str) else {"json": body}
    response = await admin(stack, method, path, **kwargs)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code


def test_cli_tenant_and_key_commands(base_settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOAT_DATABASE_URL", base_settings.database_url)
    monkeypatch.setenv("MOAT_HOME", str(base_settings.home))
    runner = CliRunner()
    name = f"cli-{uuid.uuid4().hex[:8]}"

    made = runner.invoke(cli, ["tenant", "create", name, "--json"])
    assert made.exit_code == 0, made.output
    tenant_id = json.loads(made.output)["tenant_id"]

    listed = runner.invoke(cli, ["tenant", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    assert name in [t["name"] for t in json.loads(listed.output)]

    key = runner.invoke(cli, ["key", "create", name, "--name", "ci", "--json"])
    assert key.exit_code == 0, key.output
    created = json.loads(key.output)
    assert created["tenant_id"] == tenant_id and created["api_key"].startswith(created["prefix"])

    keys = runner.invoke(cli, ["key", "list", tenant_id, "--json"])
    assert keys.exit_code == 0, keys.output
    rows = json.loads(keys.output)
    assert {"initial", "ci"} <= {k["name"] for k in rows}
    assert created["api_key"] not in keys.output

    revoked = runner.invoke(cli, ["key", "revoke", created["prefix"]])
    assert revoked.exit_code == 0, revoked.output
    assert f"key {created['id']} of {tenant_id} revoked" in revoked.output
    keys = json.loads(runner.invoke(cli, ["key", "list", tenant_id, "--json"]).output)
    assert next(k for k in keys if k["id"] == created["id"])["revoked_at"]

    table = runner.invoke(cli, ["key", "list", name])
    assert table.exit_code == 0 and created["id"] in table.output

    missing = runner.invoke(cli, ["key", "list", "no-such-tenant"])
    assert missing.exit_code == 1 and "no tenant" in missing.output
    missing = runner.invoke(cli, ["key", "revoke", "nosuchkey"])
    assert missing.exit_code == 1 and "no API key" in missing.output
    dup = runner.invoke(cli, ["tenant", "create", name])
    assert dup.exit_code == 1 and "already exists" in dup.output

    none = runner.invoke(cli, ["budget", "list", name])
    assert none.exit_code == 0 and "no budgets" in none.output
    budget = runner.invoke(cli, ["budget", "set", name, "http.request", "7", "--period", "month"])
    assert budget.exit_code == 0, budget.output
    listed = runner.invoke(cli, ["budget", "list", name, "--json"])
    assert listed.exit_code == 0, listed.output
    (row,) = json.loads(listed.output)
    assert (row["capability_id"], row["limit"], row["period"]) == ("http.request", 7, "month")
    assert (row["used"], row["in_flight"]) == (0, 0)
    table = runner.invoke(cli, ["budget", "list", name])
    assert table.exit_code == 0 and "http.request" in table.output and "in flight" in table.output


async def test_keys_are_stored_hashed(stack: Stack) -> None:
    async with stack.sessions() as s:
        row = (
            await s.execute(select(ApiKey).where(ApiKey.tenant_id == stack.tenant_id))
        ).scalar_one()
    secret = stack.api_key.split("_", 2)[2]
    assert row.id == stack.api_key.split("_", 2)[1]
    assert secret not in row.secret_hash and len(row.secret_hash) == 64
