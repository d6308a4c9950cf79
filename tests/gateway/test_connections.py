"""Connections: a credential stored once, sealed at rest, never answered, and resolved by
the adapter activity on every attempt under the tenant's row-level security."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from sqlalchemy import select, text

from activities.adapters import fail
from schemas.capabilities import BUILTIN_CAPABILITIES, CapabilityCatalog, CapabilitySpec
from schemas.connections import ConnectionType, Credential
from schemas.records import ErrorTaxonomy
from schemas.run import AdapterInput, AdapterOutput
from store.models import ConnectionRow
from tests.support.fakes import FakeProvider
from tests.support.stack import ADMIN_KEY, Stack, StackFactory

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
SECRET = "tok-" + "s3cr3t" * 6 + "WXYZ"
ROTATED = "tok-" + "r0t4t3d" * 6 + "QRST"

# An echo-shaped capability that takes an http_bearer connection; its adapter (planted per
# test) sees the credential of each attempt.
PROBE = CapabilitySpec(
    id="test.connection_probe",
    version="1.0.0",
    adapter="echo",
    adapter_id="probe",
    effect_type="API_CALL",
    retry={"max_retries": 2, "base_delay_seconds": 0.05},
    connection_types=(ConnectionType.HTTP_BEARER,),
)
CATALOG = CapabilityCatalog((*BUILTIN_CAPABILITIES, PROBE))


class Probe:
    """Records each attempt's secret; on the first attempt does ``during_first`` (a change
    made while that attempt runs) and fails retryably."""

    def __init__(self) -> None:
        self.seen: list[str | None] = []
        self.during_first: Any = None

    async def __call__(self, inp: AdapterInput, credential: Credential | None) -> AdapterOutput:
        self.seen.append(credential.secret if credential else None)
        if inp.attempt == 1 and self.during_first is not None:
            await self.during_first()
            raise fail(ErrorTaxonomy.PROVIDER_SERVER_ERROR, "try again", http_status=503)
        return AdapterOutput(output_hash="sha256:" + "0" * 64, output={"ok": True})


@pytest_asyncio.fixture(loop_scope="session")
async def probed(
    make_stack: StackFactory, provider: FakeProvider
) -> AsyncIterator[tuple[Stack, Probe]]:
    probe = Probe()
    async with make_stack(
        catalog=CATALOG, adapters={"echo": probe}, http_allow_hosts=[provider.allow_entry]
    ) as s:
        yield s, probe


async def writer_key(stack: Stack) -> str:
    made = await stack.http.post(
        f"{stack.url}/v1/admin/tenants/{stack.tenant_id}/keys",
        json={"scopes": ["execute:*", "connections:write"]},
        headers=ADMIN,
    )
    key: str = made.json()["api_key"]
    return key


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_a_connection_is_stored_sealed_and_sent_as_the_bearer(
    probed: tuple[Stack, Probe], provider: FakeProvider
) -> None:
    stack, _ = probed
    body = {"type": "http_bearer", "name": "crm", "secret": SECRET, "config": {"team": "ops"}}
    refused = await stack.http.post(
        f"{stack.url}/v1/connections", json=body, headers=bearer(stack.api_key)
    )
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "scope_missing"

    made = await stack.http.post(
        f"{stack.url}/v1/connections", json=body, headers=bearer(await writer_key(stack))
    )
    assert made.status_code == 201, made.text
    info = made.json()
    assert info["id"].startswith("con_") and info["type"] == "http_bearer"
    assert info["config"] == {"team": "ops"} and info["last4"] == "WXYZ"
    assert info["fingerprint"].startswith("sha256:") and SECRET not in made.text

    async with stack.sessions() as s:
        row = (
            await s.execute(select(ConnectionRow).where(ConnectionRow.id == info["id"]))
        ).scalar_one()
    assert row.key_id and len(row.nonce) == 12
    assert SECRET.encode() not in row.ciphertext and row.tenant_id == stack.tenant_id

    url = provider.script("/crm")
    sent = await stack.execute(
        "http.request",
        {"method": "POST", "url": url, "headers": {"AUTHORIZATION": "Bearer agents-own"}},
        connection_id=info["id"],
    )
    assert sent.status_code == 200, sent.text
    (call,) = provider.calls_to("/crm")
    assert [v for k, v in call.raw_headers if k.lower() == "authorization"] == [f"Bearer {SECRET}"]
    assert sent.json()["receipt"]["connection_id"] == info["id"]


async def test_a_rotation_applies_from_the_next_attempt(probed: tuple[Stack, Probe]) -> None:
    stack, probe = probed
    connection_id = await stack.add_connection("http_bearer", SECRET)

    async def rotate() -> None:
        rotated = await stack.http.post(
            f"{stack.url}/v1/connections/{connection_id}/rotate",
            json={"secret": ROTATED},
            headers=bearer(await writer_key(stack)),
        )
        assert rotated.status_code == 200 and rotated.json()["rotated_at"], rotated.text

    probe.during_first = rotate
    done = await stack.execute("test.connection_probe", {}, connection_id=connection_id)
    assert done.status_code == 200, done.text
    assert probe.seen == [SECRET, ROTATED]


async def test_a_revoked_connection_fails_the_run_with_a_receipt(
    probed: tuple[Stack, Probe],
) -> None:
    stack, probe = probed
    connection_id = await stack.add_connection("http_bearer", SECRET)

    async def revoke() -> None:
        revoked = await stack.http.delete(
            f"{stack.url}/v1/connections/{connection_id}", headers=bearer(await writer_key(stack))
        )
        assert revoked.status_code == 200 and revoked.json()["revoked_at"], revoked.text

    probe.during_first = revoke
    failed = await stack.execute("test.connection_probe", {}, connection_id=connection_id)
    assert failed.status_code == 403, failed.text
    envelope = failed.json()
    assert envelope["error"]["code"] == "connection_revoked"
    assert envelope["receipt"]["status"] == "failure"
    assert probe.seen == [SECRET]  # the second attempt never reached the adapter
    # Revoked at once for new executions too, and kept for the record without its secret.
    again = await stack.execute("test.connection_probe", {"n": 2}, connection_id=connection_id)
    assert again.status_code == 403 and again.json()["error"]["code"] == "connection_revoked"
    async with stack.sessions() as s:
        row = await s.get(ConnectionRow, connection_id)
    assert row is not None and row.revoked_at is not None and row.ciphertext == b""


async def test_the_resolver_sees_only_the_tenants_own_connections(
    probed: tuple[Stack, Probe],
) -> None:
    """Past the gateway's checks, the activity still refuses another tenant's connection."""
    stack, probe = probed
    other_tenant, _ = await stack.new_tenant()
    theirs = await stack.add_connection("http_bearer", SECRET, tenant_id=other_tenant)
    result = await stack.start_direct(PROBE, {}, connection_id=theirs)
    assert result.receipt is not None and result.receipt.error_code == "connection_not_found"
    assert probe.seen == []
    async with stack.sessions() as s:
        # Row-level security: as the application role, the tenant sees no other's rows.
        await s.execute(text("SET LOCAL ROLE moat_app"))
        await s.execute(text(f"SELECT set_config('moat.tenant_id', '{stack.tenant_id}', true)"))
        count = (await s.execute(select(ConnectionRow).where(ConnectionRow.id == theirs))).all()
    assert count == []
