"""A tenant's own operations-alert route: its alerts go to its own webhook once, as an
execution in that tenant under the key that set the route (not to the deployment's route,
which keeps every other tenant's); a key that cannot execute ``webhook.post`` cannot set
it; a revoked key sends nothing; another tenant's route never hears them."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
from click.testing import Result
from typer.testing import CliRunner

from activities.alerts import Alerter
from schemas.alerts import AlertKind, alert_key
from schemas.run import workflow_id_for
from schemas.webhooks import execution_dead_letter_id
from starter.cli import app as cli
from starter.devstack.providers import FakeWebhookReceiver
from store import dead_letters, tenancy
from tests.gateway.test_policy import ADMIN, bearer
from tests.support.stack import Stack, StackFactory
from tests.system.test_operations_alerts import again, announced
from tests.workflows.test_reconcile import CATALOG

ROUTE_SCOPES = ["policy:write", "execute:webhook.post"]


@pytest.fixture(scope="module")
def receiver() -> Iterator[FakeWebhookReceiver]:
    with FakeWebhookReceiver() as fake:
        yield fake


@pytest_asyncio.fixture(loop_scope="session")
async def stack(make_stack: StackFactory, receiver: FakeWebhookReceiver) -> AsyncIterator[Stack]:
    async with make_stack(
        catalog=CATALOG,
        http_allow_hosts=[receiver.allow_entry],
        alerts_tenant="set-below",
        alerts_target="-",
    ) as s:
        # The deployment's route: the stack's tenant's webhook, at /ops.
        ops = await s.add_connection("webhook", _secret(), config={"base_url": receiver.base_url})
        s.settings.alerts_tenant = s.tenant_id
        s.settings.alerts_connection_id = ops
        s.settings.alerts_target = f"{receiver.base_url}/ops"
        yield s


def _secret() -> str:
    return "whsec_" + base64.b64encode(os.urandom(32)).decode()


async def tenant_key(stack: Stack, tenant_id: str, scopes: list[str]) -> tuple[str, str]:
    """A new key of ``tenant_id``: (the key, its id)."""
    made = await stack.http.post(
        f"{stack.url}/v1/admin/tenants/{tenant_id}/keys", json={"scopes": scopes}, headers=ADMIN
    )
    assert made.status_code == 201, made.text
    return made.json()["api_key"], made.json()["id"]


async def routed_tenant(
    stack: Stack, receiver: FakeWebhookReceiver, path: str
) -> tuple[str, str, str]:
    """A new tenant with its own webhook route to ``path``: (tenant, key, key id)."""
    tid, _ = await stack.new_tenant()
    con = await stack.add_connection(
        "webhook", _secret(), config={"base_url": receiver.base_url}, tenant_id=tid
    )
    key, key_id = await tenant_key(stack, tid, ROUTE_SCOPES)
    body = {"connection_id": con, "target": f"{receiver.base_url}{path}"}
    put = await stack.http.put(f"{stack.url}/v1/alerts/route", json=body, headers=bearer(key))
    assert put.status_code == 200, put.text
    assert put.json()["connection_id"] == con and put.json()["target"].endswith(path)
    return tid, key, key_id


async def dead_letter(stack: Stack, tenant_id: str) -> str:
    receipt_id = str(uuid.uuid4())
    async with tenancy.tenant_transaction(stack.sessions, tenant_id) as session:
        await dead_letters.record_execution(
            session,
            tenant_id=tenant_id,
            receipt_id=receipt_id,
            reason="the effect's retries ran out",
            error_code="provider_unavailable",
            attempted={"capability_id": "http.request"},
        )
    return execution_dead_letter_id(receipt_id)


def at(receiver: FakeWebhookReceiver, path: str) -> list[dict[str, object]]:
    return [json.loads(d.body)["data"] for d in receiver.deliveries if d.path == path]


async def test_a_tenants_alert_goes_to_its_own_route_once(
    stack: Stack, receiver: FakeWebhookReceiver
) -> None:
    a, _, _ = await routed_tenant(stack, receiver, "/tenant-a")
    b, _, _ = await routed_tenant(stack, receiver, "/tenant-b")
    letter = await dead_letter(stack, a)
    # Without a deployment route the hand-off still starts: the tenant has its own.
    alerter = Alerter(stack.client, stack.settings.deliveries_task_queue, False, stack.sessions)
    await alerter.hand_off(a, AlertKind.DEAD_LETTER, letter)
    assert (await announced(stack, AlertKind.DEAD_LETTER, letter)).status == "success"
    await again(stack, a, AlertKind.DEAD_LETTER, letter)

    [alert] = at(receiver, "/tenant-a")
    assert alert["tenant_id"] == a and alert["handle_with"] == f"moat dlq show {letter}"
    # Not the deployment's route, never another tenant's.
    assert not [d for d in at(receiver, "/ops") if d["event_id"] == letter]
    assert not at(receiver, "/tenant-b")
    # An execution in the tenant itself (the key's authority: the revoked-key test below).
    run = stack.client.get_workflow_handle(
        workflow_id_for(a, alert_key(AlertKind.DEAD_LETTER, letter))
    )
    assert (await run.describe()).status is not None

    # Tenant B's own alert reaches B only; a tenant without a route, the deployment's.
    other = await dead_letter(stack, b)
    await alerter.hand_off(b, AlertKind.DEAD_LETTER, other)
    assert (await announced(stack, AlertKind.DEAD_LETTER, other)).status == "success"
    assert len(at(receiver, "/tenant-a")) == 1 and len(at(receiver, "/tenant-b")) == 1
    plain = await dead_letter(stack, stack.tenant_id)
    await alerter.hand_off(stack.tenant_id, AlertKind.DEAD_LETTER, plain)
    assert not [d for d in at(receiver, "/ops") if d["event_id"] == plain]  # not enabled
    routed = Alerter(stack.client, stack.settings.deliveries_task_queue, True)
    await routed.hand_off(stack.tenant_id, AlertKind.DEAD_LETTER, plain)
    assert (await announced(stack, AlertKind.DEAD_LETTER, plain)).status == "success"
    assert [d["event_id"] for d in at(receiver, "/ops")].count(plain) == 1


async def test_setting_needs_the_capability_and_a_revoked_key_sends_nothing(
    stack: Stack, receiver: FakeWebhookReceiver
) -> None:
    tid, key, key_id = await routed_tenant(stack, receiver, "/revoked")
    shown = await stack.http.get(f"{stack.url}/v1/alerts/route", headers=bearer(key))
    assert shown.status_code == 200 and shown.json()["target"].endswith("/revoked")
    con = shown.json()["connection_id"]
    body = {"connection_id": con, "target": f"{receiver.base_url}/other"}
    for scopes, missing in ((["policy:write"], "execute:webhook.post"), (["execute:*"], None)):
        weak, _ = await tenant_key(stack, tid, scopes)
        put = await stack.http.put(f"{stack.url}/v1/alerts/route", json=body, headers=bearer(weak))
        assert put.status_code == 403, put.text
        assert missing is None or missing in put.text
    # Another tenant's connection is as absent.
    other, _ = await stack.new_tenant()
    key_b, _ = await tenant_key(stack, other, ROUTE_SCOPES)
    put = await stack.http.put(f"{stack.url}/v1/alerts/route", json=body, headers=bearer(key_b))
    assert put.status_code == 404 and "connection_not_found" in put.text

    revoked = await stack.http.post(f"{stack.url}/v1/admin/keys/{key_id}/revoke", headers=ADMIN)
    assert revoked.status_code == 200, revoked.text
    letter = await dead_letter(stack, tid)
    await Alerter(stack.client, stack.settings.deliveries_task_queue, True).hand_off(
        tid, AlertKind.DEAD_LETTER, letter
    )
    result = await announced(stack, AlertKind.DEAD_LETTER, letter)
    assert (result.skipped or "").startswith("key_revoked"), result
    assert not at(receiver, "/revoked") and not at(receiver, "/other")
    assert not [d for d in at(receiver, "/ops") if d["event_id"] == letter]

    live, _ = await tenant_key(stack, tid, ROUTE_SCOPES)
    cleared = await stack.http.delete(f"{stack.url}/v1/alerts/route", headers=bearer(live))
    assert cleared.status_code == 204
    gone = await stack.http.get(f"{stack.url}/v1/alerts/route", headers=bearer(live))
    assert gone.status_code == 404 and "moat alerts route set" in gone.text


async def test_route_from_the_cli(
    stack: Stack, receiver: FakeWebhookReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    tid, _ = await stack.new_tenant()
    con = await stack.add_connection(
        "webhook", _secret(), config={"base_url": receiver.base_url}, tenant_id=tid
    )
    key, _ = await tenant_key(stack, tid, ROUTE_SCOPES)
    narrow, _ = await tenant_key(stack, tid, ["policy:write"])
    monkeypatch.setenv("MOAT_GATEWAY_URL", stack.url)
    runner = CliRunner()

    async def moat(api_key: str, *args: str) -> Result:
        argv = ["alerts", "route", *args, "--api-key", api_key]
        return await asyncio.to_thread(runner.invoke, cli, argv)

    target = f"{receiver.base_url}/cli"
    made = await moat(key, "set", con, target)
    assert made.exit_code == 0, made.output
    shown = await moat(key, "show")
    assert shown.exit_code == 0 and target in shown.output and con in shown.output
    refused = await moat(narrow, "set", con, target)
    assert refused.exit_code == 1 and "scope_missing" in refused.output
    assert (await moat(key, "clear")).exit_code == 0
    gone = await moat(key, "show")
    assert gone.exit_code == 1 and "not_found" in gone.output
