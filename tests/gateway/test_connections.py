"""Connections: a credential stored once, sealed at rest, never answered, and resolved by
the adapter activity on every attempt under the tenant's row-level security."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from typer.testing import CliRunner

from activities.adapters import fail
from schemas.capabilities import BUILTIN_CAPABILITIES, CapabilityCatalog, CapabilitySpec
from schemas.connections import ConnectionType, Credential
from schemas.records import ErrorTaxonomy
from schemas.run import AdapterInput, AdapterOutput
from starter.cli import app as cli
from store import tenancy
from store.keyrings.connections import ConnectionCipher
from store.models import ConnectionRow
from tests.support.fakes import FakeProvider
from tests.support.stack import ADMIN_KEY, Stack, StackFactory

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
SECRET = "tok-" + "s3cr3t" * 6 + "WXYZ"
ROTATED = "tok-" + "r0t4t3d" * 6 + "QRST"
# Where the probe capability's connections may send their secret (it sends nothing).
CRM = {"base_url": "https://crm.example.com"}

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
    config = {"team": "ops", "base_url": provider.base_url}
    body = {"type": "http_bearer", "name": "crm", "secret": SECRET, "config": config}
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
    assert info["config"] == config and info["last4"] == "WXYZ"
    assert info["fingerprint"].startswith("hmac:") and SECRET not in made.text

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
    connection_id = await stack.add_connection("http_bearer", SECRET, config=CRM)

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
    probed: tuple[Stack, Probe], app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    stack, probe = probed
    connection_id = await stack.add_connection("http_bearer", SECRET, config=CRM)

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
    # The application role can neither bring it back nor make it go away.
    for statement, error in (
        ("UPDATE connections SET revoked_at = NULL WHERE id = :id", "revocation is final"),
        ("UPDATE connections SET key_id = 'x' WHERE id = :id", "revocation is final"),
        ("DELETE FROM connections WHERE id = :id", "permission denied"),
    ):
        async with app_sessions.begin() as s:
            await tenancy.set_tenant(s, stack.tenant_id)
            with pytest.raises(DBAPIError, match=error):
                await s.execute(text(statement), {"id": connection_id})


async def test_the_resolver_sees_only_the_tenants_own_connections(
    probed: tuple[Stack, Probe],
) -> None:
    """Past the gateway's checks, the activity still refuses another tenant's connection."""
    stack, probe = probed
    other_tenant, _ = await stack.new_tenant()
    theirs = await stack.add_connection("http_bearer", SECRET, tenant_id=other_tenant, config=CRM)
    result = await stack.start_direct(PROBE, {}, connection_id=theirs)
    assert result.receipt is not None and result.receipt.error_code == "connection_not_found"
    assert probe.seen == []
    async with stack.sessions() as s:
        # Row-level security: as the application role, the tenant sees no other's rows.
        await s.execute(text("SET LOCAL ROLE moat_app"))
        await s.execute(text(f"SELECT set_config('moat.tenant_id', '{stack.tenant_id}', true)"))
        count = (await s.execute(select(ConnectionRow).where(ConnectionRow.id == theirs))).all()
    assert count == []


async def test_connection_routes_check_and_never_answer_the_secret(
    probed: tuple[Stack, Probe], provider: FakeProvider
) -> None:
    stack, probe = probed
    writer = bearer(await writer_key(stack))
    base = f"{stack.url}/v1/connections"
    admin_base = f"{stack.url}/v1/admin/tenants/{stack.tenant_id}/connections"
    answers: list[str] = []

    async def call(method: str, url: str, **kwargs: Any) -> Any:
        response = await stack.http.request(method, url, **kwargs)
        answers.append(response.text)
        return response

    mine = (
        await call(
            "POST",
            admin_base,
            json={"type": "slack", "name": "ws", "secret": SECRET},
            headers=ADMIN,
        )
    ).json()
    other_tenant, _ = await stack.new_tenant()
    theirs = await stack.add_connection("http_bearer", ROTATED, tenant_id=other_tenant, config=CRM)

    listed = (await call("GET", base, headers=bearer(stack.api_key))).json()["items"]
    assert [c["id"] for c in listed] == [mine["id"]]
    assert (await call("GET", f"{base}/{mine['id']}", headers=writer)).json()["name"] == "ws"
    admin_listed = (await call("GET", admin_base, headers=ADMIN)).json()["items"]
    assert [c["id"] for c in admin_listed] == [mine["id"]]
    for url, headers in ((f"{base}/{theirs}", writer), (f"{admin_base}/{theirs}", ADMIN)):
        hidden = await call("GET", url, headers=headers)
        assert hidden.status_code == 404, hidden.text
        assert hidden.json()["error"]["code"] == "connection_not_found"
    cross = await call("POST", f"{base}/{theirs}/rotate", json={"secret": SECRET}, headers=writer)
    assert cross.status_code == 404

    # Ingest: another tenant's or an absent connection, or a type the capability cannot use.
    url = provider.script("/ingest")
    request = {"method": "GET", "url": url}
    for connection_id, status, code in (
        (theirs, 404, "connection_not_found"),
        ("con_doesnotexist", 404, "connection_not_found"),
        (mine["id"], 400, "connection_type_mismatch"),
    ):
        refused = await stack.execute("http.request", request, connection_id=connection_id)
        assert refused.status_code == status, refused.text
        assert refused.json()["error"]["code"] == code and refused.json()["receipt"] is None
    takes_none = await stack.execute("demo.echo", {}, connection_id=mine["id"])
    assert takes_none.json()["error"]["code"] == "connection_type_mismatch"
    assert provider.calls_to("/ingest") == [] and probe.seen == []

    # Refused bodies never repeat the secret either.
    for body in (
        {"type": "http_bearer", "name": "x", "secret": SECRET + "\n"},
        {
            "type": "http_bearer",
            "name": "x",
            "secret": SECRET,
            "config": {**CRM, "api_token": SECRET},
        },
        {"type": "nope", "name": "x", "secret": SECRET},
    ):
        bad = await call("POST", base, json=body, headers=writer)
        assert bad.status_code == 400, bad.text
        assert bad.json()["error"]["code"] == "schema_validation_failed"

    rotated = await call(
        "POST", f"{admin_base}/{mine['id']}/rotate", json={"secret": ROTATED}, headers=ADMIN
    )
    assert rotated.json()["fingerprint"] != mine["fingerprint"]
    revoked = (await call("DELETE", f"{admin_base}/{mine['id']}", headers=ADMIN)).json()
    again = (await call("DELETE", f"{base}/{mine['id']}", headers=writer)).json()
    assert revoked["revoked_at"] and again["revoked_at"] == revoked["revoked_at"]
    refused = await call(
        "POST", f"{base}/{mine['id']}/rotate", json={"secret": SECRET}, headers=writer
    )
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "connection_revoked"
    # What a DELETE revoked is gone for a single read, by the tenant or the admin, and stays
    # in the list for the record.
    for url, headers in ((f"{base}/{mine['id']}", writer), (f"{admin_base}/{mine['id']}", ADMIN)):
        gone = await call("GET", url, headers=headers)
        assert gone.status_code == 410, gone.text
        assert gone.json()["error"]["code"] == "connection_gone"
        assert gone.json()["error"]["details"]["revoked_at"] is not None
    listed = (await call("GET", base, headers=writer)).json()["items"]
    assert next(c for c in listed if c["id"] == mine["id"])["revoked_at"] == revoked["revoked_at"]
    assert not any(s in a for a in answers for s in (SECRET, ROTATED))

    listed_caps = (await stack.http.get(f"{stack.url}/v1/capabilities")).json()
    http = next(c for c in listed_caps if c["id"] == "http.request")
    assert http["connection_types"] == ["http_bearer", "oauth2"]
    assert http["required_scopes"] == ["execute:http.request"]


def test_cli_connection_commands(base_settings: Any, monkeypatch: Any, tmp_path: Any) -> None:
    """add (secret on stdin), list, show, rotate (--secret-file), reencrypt under a new key,
    revoke; no command prints a secret."""
    monkeypatch.setenv("MOAT_DATABASE_URL", base_settings.database_url)
    monkeypatch.setenv("MOAT_HOME", str(base_settings.home))
    runner = CliRunner()
    tenant = f"conn-{uuid.uuid4().hex[:8]}"
    assert runner.invoke(cli, ["tenant", "create", tenant]).exit_code == 0
    printed: list[str] = []

    def moat(*args: str, stdin: str | None = None) -> Any:
        done = runner.invoke(cli, list(args), input=stdin)
        printed.append(done.output)
        return done

    added = moat(
        "connection",
        "add",
        tenant,
        "--type",
        "github",
        "--name",
        "gh",
        "--config",
        '{"base_url": "https://ghe.example.com/api/v3"}',
        "--json",
        stdin=SECRET + "\n",
    )
    assert added.exit_code == 0, added.output
    made = json.loads(added.output)
    assert made["last4"] == "WXYZ" and made["config"]["base_url"].startswith("https://ghe")
    table = moat("connection", "list", tenant)
    assert table.exit_code == 0 and made["id"] in table.output and "github" in table.output
    assert moat("connection", "show", tenant, made["id"]).exit_code == 0

    secret_file = tmp_path / "secret"
    secret_file.write_text(ROTATED + "\n")
    rotated = moat(
        "connection", "rotate", tenant, made["id"], "--secret-file", str(secret_file), "--json"
    )
    assert rotated.exit_code == 0, rotated.output
    assert json.loads(rotated.output)["fingerprint"] != made["fingerprint"]

    again = moat("connection", "reencrypt", "--new-key", "--json")
    assert again.exit_code == 0, again.output
    report = json.loads(again.output)
    assert report["active_key_id"] != made["key_id"] and report["by_tenant"][made["tenant_id"]] == 1
    shown = json.loads(moat("connection", "show", tenant, made["id"], "--json").output)
    assert shown["key_id"] == report["active_key_id"]
    # A process started before the new key (a worker) still opens what it seals.
    cipher = ConnectionCipher.from_settings(base_settings)
    assert cipher.active_key_id == report["active_key_id"]

    revoked = moat("connection", "revoke", tenant, made["id"], "--json")
    assert revoked.exit_code == 0 and json.loads(revoked.output)["revoked_at"]
    missing = moat("connection", "show", tenant, "con_nothere")
    assert missing.exit_code == 1 and "No connection" in missing.output
    empty = moat("connection", "add", tenant, "--type", "slack", "--name", "x", stdin="")
    assert empty.exit_code == 2 and "no secret" in empty.output
    assert not any(s in p for p in printed for s in (SECRET, ROTATED))
