"""Per-tenant host allow-lists: set by an operator (admin API or CLI), applied by the worker
to that tenant's calls only, on top of the worker's own list."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from typer.testing import CliRunner

from schemas.settings import MoatSettings
from starter.cli import app as cli
from starter.devstack import serve_asgi
from starter.gateway.app import create_app
from tests.gateway.test_pagination import every_page
from tests.support.fakes import FakeProvider, Step
from tests.support.stack import ADMIN_KEY, Stack, StackFactory

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


async def patch(stack: Stack, tenant_id: str, body: Any, **headers: str) -> Any:
    return await stack.http.patch(
        f"{stack.url}/v1/admin/tenants/{tenant_id}", json=body, headers={**ADMIN, **headers}
    )


def call(url: str) -> dict[str, Any]:
    return {"method": "POST", "url": url, "json": {"n": 1}}


async def test_a_tenant_list_admits_that_tenant_only(
    make_stack: StackFactory, provider: FakeProvider
) -> None:
    url = provider.script("/tenant-allowed", Step(200, {"ok": True}))
    # The worker allows nothing of its own: only tenant A's list opens loopback.
    async with make_stack(http_allow_hosts=[]) as stack:
        tenant_b, key_b = await stack.new_tenant()
        answer = await patch(stack, stack.tenant_id, {"http_allow_hosts": [provider.allow_entry]})
        assert answer.status_code == 200, answer.text

        allowed = await stack.execute("http.request", call(url), key="a-1")
        assert allowed.status_code == 200, allowed.text
        assert allowed.json()["status"] == "executed"

        refused = await stack.execute("http.request", call(url), key="b-1", api_key=key_b)
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "host_not_allowed"
        assert refused.json()["receipt"]["tenant_id"] == tenant_b
        # A's next call still passes: B's refusal took nothing from A's list.
        again = await stack.execute("http.request", call(url), key="a-2")
        assert again.status_code == 200, again.text
    assert len(provider.calls_to("/tenant-allowed")) == 2


async def test_the_port_of_a_tenant_entry_counts(
    make_stack: StackFactory, provider: FakeProvider
) -> None:
    url = provider.script("/tenant-port", Step(200))
    async with make_stack(http_allow_hosts=[]) as stack:
        # A bare address means ports 80 and 443: the provider's port stays closed.
        answer = await patch(stack, stack.tenant_id, {"http_allow_hosts": ["127.0.0.1"]})
        assert answer.status_code == 200, answer.text
        refused = await stack.execute("http.request", call(url))
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "host_not_allowed"
    assert provider.calls_to("/tenant-port") == []


async def test_admin_patch_round_trip(stack: Stack) -> None:
    body = {"http_allow_hosts": ["API.example.com", "10.0.0.5:8443", "[::1]:8080", "10.0.0.5:8443"]}
    answer = await patch(stack, stack.tenant_id, body)
    assert answer.status_code == 200, answer.text
    stored = ["api.example.com", "10.0.0.5:8443", "[::1]:8080"]  # normalized, deduplicated
    assert answer.json()["http_allow_hosts"] == stored

    one = await stack.http.get(f"{stack.url}/v1/admin/tenants/{stack.tenant_id}", headers=ADMIN)
    assert one.json()["http_allow_hosts"] == stored
    listed = await every_page(stack.http, f"{stack.url}/v1/admin/tenants", ADMIN)
    assert next(t for t in listed if t["id"] == stack.tenant_id)["http_allow_hosts"] == stored

    # A body without the field changes nothing; an empty list empties it.
    assert (await patch(stack, stack.tenant_id, {})).json()["http_allow_hosts"] == stored
    assert (await patch(stack, stack.tenant_id, {"http_allow_hosts": []})).json()[
        "http_allow_hosts"
    ] == []


@pytest.mark.parametrize(
    "body",
    [
        {"http_allow_hosts": ["ok.example.com", "http://bad.example.com/"]},
        {"http_allow_hosts": ["ok.example.com", "bad.example.com:99999"]},
        {"http_allow_hosts": ["*.bad.example.com"]},
        {"http_allow_hosts": "bad.example.com"},
        {"http_allow_hosts": [f"h{i}.example.com" for i in range(101)]},
        {"policy_mode": "bypass"},
    ],
)
async def test_admin_patch_refuses_bad_entries(stack: Stack, body: dict[str, Any]) -> None:
    answer = await patch(stack, stack.tenant_id, body)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "schema_validation_failed"
    entries = body.get("http_allow_hosts")
    if isinstance(entries, list) and len(entries) < 3:
        assert repr(entries[-1]) in json.dumps(error["details"]["errors"])  # names the entry
    one = await stack.http.get(f"{stack.url}/v1/admin/tenants/{stack.tenant_id}", headers=ADMIN)
    assert one.json()["http_allow_hosts"] == []


async def test_admin_patch_refusals(stack: Stack) -> None:
    missing = await patch(stack, "ten_doesnotexist0000", {"http_allow_hosts": []})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "tenant_not_found"
    # A tenant cannot open the path for itself with its own key.
    own = await patch(
        stack,
        stack.tenant_id,
        {"http_allow_hosts": ["169.254.169.254"]},
        Authorization=f"Bearer {stack.api_key}",
    )
    assert own.status_code == 403 and own.json()["error"]["code"] == "forbidden"
    one = await stack.http.get(f"{stack.url}/v1/admin/tenants/{stack.tenant_id}", headers=ADMIN)
    assert one.json()["http_allow_hosts"] == []


async def test_a_gateway_without_the_owner_url_cannot_patch(
    stack: Stack, base_settings: MoatSettings, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    """The application role may not write the list, so a gateway that has only its URL
    says so instead of failing."""
    settings = stack.settings.model_copy(
        update={"database_url": None, "database_app_url": base_settings.app_sqlalchemy_url}
    )
    app = create_app(settings, client=stack.client, sessions=app_sessions)
    async with serve_asgi(app) as url:
        answer = await stack.http.patch(
            f"{url}/v1/admin/tenants/{stack.tenant_id}",
            json={"http_allow_hosts": ["10.0.0.5"]},
            headers=ADMIN,
        )
    assert answer.status_code == 403, answer.text
    assert answer.json()["error"]["code"] == "forbidden"
    assert "MOAT_DATABASE_URL" in answer.json()["error"]["message"]


def test_cli_tenant_allow_hosts(
    base_settings: MoatSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert base_settings.database_url is not None
    monkeypatch.setenv("MOAT_DATABASE_URL", base_settings.database_url)
    monkeypatch.setenv("MOAT_HOME", str(base_settings.home))
    runner = CliRunner()
    name = f"hosts-{uuid.uuid4().hex[:8]}"
    assert runner.invoke(cli, ["tenant", "create", name]).exit_code == 0

    made = runner.invoke(cli, ["tenant", "allow-hosts", name, "API.example.com", "10.0.0.5:8443"])
    assert made.exit_code == 0, made.output
    assert "api.example.com, 10.0.0.5:8443" in made.output
    shown = runner.invoke(cli, ["tenant", "allow-hosts", name, "--json"])
    assert json.loads(shown.output) == ["api.example.com", "10.0.0.5:8443"]
    listed = json.loads(runner.invoke(cli, ["tenant", "list", "--json"]).output)
    row = next(t for t in listed if t["name"] == name)
    assert row["http_allow_hosts"] == ["api.example.com", "10.0.0.5:8443"]
    assert runner.invoke(cli, ["tenant", "list"]).exit_code == 0

    bad = runner.invoke(cli, ["tenant", "allow-hosts", name, "ok.example.com", "http://x/"])
    assert bad.exit_code == 1 and "'http://x/'" in bad.output and "host:port" in bad.output
    kept = runner.invoke(cli, ["tenant", "allow-hosts", name, "--json"])
    assert json.loads(kept.output) == ["api.example.com", "10.0.0.5:8443"]

    cleared = runner.invoke(cli, ["tenant", "allow-hosts", name, "--clear"])
    assert cleared.exit_code == 0 and "none (public hosts only)" in cleared.output
    both = runner.invoke(cli, ["tenant", "allow-hosts", name, "a.example", "--clear"])
    assert both.exit_code == 2
    missing = runner.invoke(cli, ["tenant", "allow-hosts", "no-such-tenant", "a.example"])
    assert missing.exit_code == 1 and "no tenant" in missing.output


async def test_a_refused_answer_names_the_host_and_port(stack: Stack) -> None:
    """A port the lists do not admit (the stack's lists name the fake provider's only): the
    answer names the host and port and how an operator allows them, and nothing of the URL
    past its host."""
    refused = await stack.execute("http.request", call("http://127.0.0.1:9/x?token=s3cr3t"))
    assert refused.status_code == 403, refused.text
    error = refused.json()["error"]
    assert error["code"] == "host_not_allowed"
    assert "127.0.0.1 (port 9)" in error["message"], error
    assert f"add 127.0.0.1:9 to tenant {stack.tenant_id}'s allow-list" in error["message"]
    assert f"PATCH /v1/admin/tenants/{stack.tenant_id}" in error["message"]
    assert error["details"]["refused_target"] == {
        "host": "127.0.0.1",
        "port": 9,
        "allow_entry": "127.0.0.1:9",
    }
    assert "s3cr3t" not in refused.text
