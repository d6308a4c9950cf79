"""Per-tenant quotas: each create path refuses at the tenant's limit with `429
quota_exceeded` naming the quota, its limit and the usage, frees a slot when one is removed,
and holds under concurrent creates (real Postgres, real gateway); the admin sets a tenant's
own limits and the tenant reads them with its usage."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from schemas.settings import MoatSettings
from starter.cli import app as cli
from tests.gateway.test_policy import ADMIN, bearer, new_key
from tests.support.stack import Stack

Create = Callable[[Stack, str], Awaitable[httpx.Response]]
Remove = Callable[[Stack, str, httpx.Response], Awaitable[None]]


async def set_quotas(stack: Stack, tenant_id: str | None = None, **limits: int | None) -> Any:
    answer = await stack.http.patch(
        f"{stack.url}/v1/admin/tenants/{tenant_id or stack.tenant_id}/quotas",
        json=limits,
        headers=ADMIN,
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def state(report: dict[str, Any], quota: str) -> dict[str, Any]:
    [found] = [q for q in report["quotas"] if q["quota"] == quota]
    return found


async def add_webhook(stack: Stack, key: str) -> httpx.Response:
    body = {"url": f"https://hooks.example.com/{uuid.uuid4().hex}", "events": ["execution.failed"]}
    return await stack.http.post(f"{stack.url}/v1/webhooks", json=body, headers=bearer(key))


async def remove_webhook(stack: Stack, key: str, made: httpx.Response) -> None:
    gone = await stack.http.delete(
        f"{stack.url}/v1/webhooks/{made.json()['id']}", headers=bearer(key)
    )
    assert gone.status_code == 204, gone.text


async def add_connection(stack: Stack, key: str) -> httpx.Response:
    body = {
        "type": "http_bearer",
        "name": f"c-{uuid.uuid4().hex[:8]}",
        "secret": "s3cret-value",
        "config": {"base_url": "https://api.example.com"},
    }
    return await stack.http.post(f"{stack.url}/v1/connections", json=body, headers=bearer(key))


async def revoke_connection(stack: Stack, key: str, made: httpx.Response) -> None:
    gone = await stack.http.delete(
        f"{stack.url}/v1/connections/{made.json()['id']}", headers=bearer(key)
    )
    assert gone.status_code == 200, gone.text


async def add_probe(stack: Stack, key: str) -> httpx.Response:
    body = {"capability_id": "demo.echo", "interval_seconds": 3600}
    return await stack.http.post(f"{stack.url}/v1/probes", json=body, headers=bearer(key))


async def remove_probe(stack: Stack, key: str, made: httpx.Response) -> None:
    gone = await stack.http.delete(
        f"{stack.url}/v1/probes/{made.json()['id']}", headers=bearer(key)
    )
    assert gone.status_code == 204, gone.text


async def put_policy(stack: Stack, key: str) -> httpx.Response:
    return await stack.http.put(
        f"{stack.url}/v1/policy", json={"mode": "standard"}, headers=bearer(key)
    )


# quota, create, remove (None: nothing frees a slot; the admin raises the limit instead).
CASES: list[tuple[str, Create, Remove | None]] = [
    ("webhooks", add_webhook, remove_webhook),
    ("connections", add_connection, revoke_connection),
    ("probes", add_probe, remove_probe),
    ("policy_versions", put_policy, None),
]


def refused(answer: httpx.Response, quota: str, limit: int) -> None:
    assert answer.status_code == 429, answer.text
    error = answer.json()["error"]
    assert error["code"] == "quota_exceeded"
    assert error["details"] == {"quota": quota, "limit": limit, "usage": limit, "source": "tenant"}
    assert "ask an admin to raise" in error["message"] and quota in error["message"]


@pytest.mark.parametrize(("quota", "create", "remove"), CASES, ids=[c[0] for c in CASES])
async def test_each_quota_refuses_at_its_limit(
    stack: Stack, quota: str, create: Create, remove: Remove | None
) -> None:
    key = await new_key(stack, ["*"])
    report = await set_quotas(stack, **{quota: 2})
    assert state(report, quota) | {"counts": ""} == {
        "quota": quota,
        "limit": 2,
        "usage": 0,
        "source": "tenant",
        "counts": "",
    }
    made = [await create(stack, key) for _ in range(2)]
    assert all(m.status_code in (200, 201) for m in made), [m.text for m in made]
    refused(await create(stack, key), quota, 2)

    mine = (await stack.http.get(f"{stack.url}/v1/quotas", headers=bearer(stack.api_key))).json()
    assert state(mine, quota)["usage"] == 2 and state(mine, quota)["limit"] == 2

    if remove is not None:
        await remove(stack, key, made[0])
    else:
        await set_quotas(stack, **{quota: 3})
    again = await create(stack, key)
    assert again.status_code in (200, 201), again.text
    refused(await create(stack, key), quota, 2 if remove is not None else 3)


@pytest.mark.parametrize(("quota", "create", "remove"), CASES, ids=[c[0] for c in CASES])
async def test_concurrent_creates_at_the_limit_do_not_both_pass(
    stack: Stack, quota: str, create: Create, remove: Remove | None
) -> None:
    key = await new_key(stack, ["*"])
    await set_quotas(stack, **{quota: 1})
    answers = await asyncio.gather(*(create(stack, key) for _ in range(6)))
    codes = sorted(a.status_code for a in answers)
    assert codes[0] in (200, 201) and codes[1:] == [429] * 5, [a.text for a in answers]
    mine = (await stack.http.get(f"{stack.url}/v1/quotas", headers=bearer(stack.api_key))).json()
    assert state(mine, quota)["usage"] == 1


async def test_admin_override_and_the_tenants_view(stack: Stack) -> None:
    url = f"{stack.url}/v1/admin/tenants/{stack.tenant_id}/quotas"
    shown = (await stack.http.get(url, headers=ADMIN)).json()
    assert shown["tenant_id"] == stack.tenant_id
    assert {q["quota"] for q in shown["quotas"]} == {
        "webhooks",
        "probes",
        "connections",
        "pending_approvals",
        "policy_versions",
    }
    webhooks = state(shown, "webhooks")
    assert webhooks["source"] == "default" and webhooks["limit"] == stack.settings.quota_webhooks

    changed = await set_quotas(stack, webhooks=7, probes=0)
    assert state(changed, "webhooks")["limit"] == 7 and state(changed, "probes")["limit"] == 0
    assert state(changed, "webhooks")["source"] == "tenant"
    # A quota left out keeps its limit; null returns it to the default.
    back = await set_quotas(stack, webhooks=None)
    assert state(back, "webhooks") == webhooks
    assert state(back, "probes")["limit"] == 0 and state(back, "probes")["source"] == "tenant"

    # Another tenant is untouched; the tenant reads its own with any key, never sets them.
    other, other_key = await stack.new_tenant()
    theirs = (await stack.http.get(f"{stack.url}/v1/quotas", headers=bearer(other_key))).json()
    assert theirs["tenant_id"] == other and state(theirs, "probes")["source"] == "default"
    tenant_try = await stack.http.patch(url, json={"probes": 9}, headers=bearer(stack.api_key))
    assert tenant_try.status_code in (401, 403)

    for body in ({"webhooks": -1}, {"nonsense": 1}, {"webhooks": 10**9}):
        bad = await stack.http.patch(url, json=body, headers=ADMIN)
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "schema_validation_failed"
    missing = await stack.http.get(
        f"{stack.url}/v1/admin/tenants/ten_doesnotexist0000/quotas", headers=ADMIN
    )
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "tenant_not_found"


STRICT_ECHO = {
    "mode": "strict",
    "rules": [{"capability": "demo.echo", "requires_approval": True}],
}


async def waiting_for_approval(stack: Stack, key: str, api_key: str) -> httpx.Response:
    return await stack.execute("demo.echo", {"k": key}, key=key, api_key=api_key)


def refused_call(answer: httpx.Response, limit: int) -> None:
    assert answer.status_code == 429, answer.text
    envelope = answer.json()
    assert envelope["status"] == "failed" and envelope["receipt"]["status"] == "policy_denied"
    error = envelope["error"]
    assert error["code"] == "quota_exceeded" and "ask an admin" in error["message"]
    assert error["details"] | {"receipt_status": None} == {
        "quota": "pending_approvals",
        "limit": limit,
        "usage": limit,
        "source": "tenant",
        "receipt_status": None,
    }


async def test_a_call_that_would_wait_beyond_the_pending_approvals_quota_fails(
    stack: Stack,
) -> None:
    key = await new_key(stack, ["*"])
    assert (await put_policy_document(stack, key, STRICT_ECHO)).status_code == 200
    await set_quotas(stack, pending_approvals=1)
    first = await waiting_for_approval(stack, "pa-1", key)
    assert first.status_code == 202 and first.json()["approval"]["status"] == "pending", first.text
    second = await waiting_for_approval(stack, "pa-2", key)
    refused_call(second, 1)
    # The refusal is the execution's answer for its key, like any other failure.
    replayed = await waiting_for_approval(stack, "pa-2", key)
    refused_call(replayed, 1)

    approval = first.json()["approval"]
    rejected = await stack.http.post(
        f"{stack.url}/v1/admin/tenants/{stack.tenant_id}/approvals/{approval['id']}/reject",
        json={"input_hash": approval["input_hash"], "policy_version": approval["policy_version"]},
        headers=ADMIN,
    )
    assert rejected.status_code == 200, rejected.text
    third = await waiting_for_approval(stack, "pa-3", key)
    assert third.status_code == 202, third.text


async def test_concurrent_calls_for_the_last_approval_slot(stack: Stack) -> None:
    key = await new_key(stack, ["*"])
    assert (await put_policy_document(stack, key, STRICT_ECHO)).status_code == 200
    await set_quotas(stack, pending_approvals=1)
    answers = await asyncio.gather(
        *(waiting_for_approval(stack, f"race-{n}", key) for n in range(5))
    )
    codes = sorted(a.status_code for a in answers)
    assert codes == [202, 429, 429, 429, 429], [a.text for a in answers]


async def put_policy_document(stack: Stack, key: str, document: dict[str, Any]) -> httpx.Response:
    return await stack.http.put(f"{stack.url}/v1/policy", json=document, headers=bearer(key))


def test_cli_tenant_quotas(base_settings: MoatSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    assert base_settings.database_url is not None
    monkeypatch.setenv("MOAT_DATABASE_URL", base_settings.database_url)
    monkeypatch.setenv("MOAT_HOME", str(base_settings.home))
    monkeypatch.setenv("MOAT_QUOTA_PROBES", "7")
    runner = CliRunner()
    name = f"quotas-{uuid.uuid4().hex[:8]}"
    assert runner.invoke(cli, ["tenant", "create", name]).exit_code == 0

    shown = json.loads(runner.invoke(cli, ["tenant", "quotas", name, "--json"]).output)
    assert state(shown, "probes") | {"counts": ""} == {
        "quota": "probes",
        "limit": 7,
        "usage": 0,
        "source": "default",
        "counts": "",
    }
    made = runner.invoke(
        cli, ["tenant", "quotas", name, "--set", "webhooks=3", "--set", "probes=1", "--json"]
    )
    assert made.exit_code == 0, made.output
    assert state(json.loads(made.output), "webhooks")["limit"] == 3
    cleared = runner.invoke(cli, ["tenant", "quotas", name, "--clear", "probes", "--json"])
    assert state(json.loads(cleared.output), "probes")["source"] == "default"
    table = runner.invoke(cli, ["tenant", "quotas", name])
    assert table.exit_code == 0 and "webhooks" in table.output

    for bad in (["--set", "webhooks"], ["--set", "nothing=1"], ["--set", "webhooks=-1"]):
        refused = runner.invoke(cli, ["tenant", "quotas", name, *bad])
        assert refused.exit_code == 2, (bad, refused.output)
