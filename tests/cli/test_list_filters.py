"""Every filter of every list command of the CLI changes what comes back, and every
``--limit`` caps the rows, against a live gateway and database seeded so that each filter
has something to leave out. The lists without filters (``tenant list``, ``webhook list``,
``signing-key list``) are not here; ``trust`` is a list of scores with filters too."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from typer.testing import CliRunner

from schemas.names import TRUST_REFRESH_WORKFLOW
from schemas.probes import TrustRefreshInput
from starter.cli import app as cli
from store import tenancy
from store.models import ApprovalRow, DeadLetterRow
from tests.gateway.test_pagination import seed_deliveries
from tests.gateway.test_policy import new_key
from tests.support.fakes import FakeProvider, Step
from tests.support.stack import Stack

runner = CliRunner()


@pytest.fixture
def cli_env(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Stack:
    """The CLI pointed at the test stack: its gateway, tenant key, database and home."""
    assert stack.settings.database_url
    monkeypatch.setenv("MOAT_GATEWAY_URL", stack.url)
    monkeypatch.setenv("MOAT_API_KEY", stack.api_key)
    monkeypatch.setenv("MOAT_DATABASE_URL", stack.settings.database_url)
    monkeypatch.setenv("MOAT_HOME", str(stack.settings.home))
    monkeypatch.setenv("COLUMNS", "250")
    return stack


async def moat(*args: str) -> str:
    """``moat ARGS``' stdout; the command must succeed. The CLI blocks and the gateway
    answers on this test's loop, so it runs in a thread."""
    result = await asyncio.to_thread(runner.invoke, cli, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


async def moat_json(*args: str) -> Any:
    return json.loads(await moat(*args, "--json"))


def ids(page: dict[str, Any], field: str = "id") -> list[Any]:
    return [item[field] for item in page["items"]]


async def test_receipts_list_status_capability_and_limit(
    cli_env: Stack, provider: FakeProvider
) -> None:
    stack = cli_env
    echoed = []
    for n in range(3):
        done = await stack.execute("demo.echo", {"n": n}, key=f"lf-{n}")
        echoed.append(done.json()["receipt_id"])
    url = provider.script(f"/gone-{uuid.uuid4().hex}", Step(404, {"error": "gone"}))
    failed = await stack.execute("http.request", {"method": "GET", "url": url}, key="lf-fail")
    failure = failed.json()["receipt_id"]
    assert failed.json()["receipt"]["status"] == "failure", failed.text

    assert ids(await moat_json("receipts", "list")) == [failure, *echoed[::-1]]
    assert ids(await moat_json("receipts", "list", "--status", "failure")) == [failure]
    assert ids(await moat_json("receipts", "list", "--status", "success")) == echoed[::-1]
    assert ids(await moat_json("receipts", "list", "--capability", "http.request")) == [failure]
    assert ids(await moat_json("receipts", "list", "--capability", "demo.echo")) == echoed[::-1]
    limited = await moat_json("receipts", "list", "--limit", "2")
    assert ids(limited) == [failure, echoed[2]] and limited["next_cursor"]
    assert f"2 receipts (more: --cursor {limited['next_cursor']})" in await moat(
        "receipts", "list", "--limit", "2"
    )
    rest = await moat_json("receipts", "list", "--limit", "2", "--cursor", limited["next_cursor"])
    assert ids(rest) == echoed[1::-1] and rest["next_cursor"] is None


async def _dead_letters(stack: Stack, status: str, count: int) -> list[str]:
    made = [f"dl_{status}_{n}_{uuid.uuid4().hex[:8]}" for n in range(count)]
    async with stack.sessions.begin() as s:
        await tenancy.set_tenant(s, stack.tenant_id)
        for dl_id in made:
            s.add(
                DeadLetterRow(
                    id=dl_id,
                    tenant_id=stack.tenant_id,
                    kind="delivery",
                    subject_id="obx",
                    reason="out of attempts",
                    status=status,
                )
            )
    return sorted(made, reverse=True)  # one instant: the id orders them


async def test_dlq_list_status_limit_and_cursor(cli_env: Stack) -> None:
    opened = await _dead_letters(cli_env, "open", 3)
    resolved = await _dead_letters(cli_env, "resolved", 2)

    assert ids(await moat_json("dlq", "list")) == opened
    assert ids(await moat_json("dlq", "list", "--status", "resolved")) == resolved
    assert ids(await moat_json("dlq", "list", "--status", "requeued")) == []
    first = await moat_json("dlq", "list", "--limit", "2")
    assert ids(first) == opened[:2] and first["next_cursor"]
    rest = await moat_json("dlq", "list", "--limit", "2", "--cursor", first["next_cursor"])
    assert ids(rest) == opened[2:] and rest["next_cursor"] is None
    table = await moat("dlq", "list", "--status", "resolved", "--limit", "1")
    assert resolved[0] in table and resolved[1] not in table
    assert "1 resolved dead letters (more: --cursor " in table


async def test_webhook_deliveries_limit_and_cursor(cli_env: Stack) -> None:
    path, delivered = await seed_deliveries(cli_env, cli_env.api_key)
    webhook_id = path.split("/")[3]
    _, elsewhere = await seed_deliveries(cli_env, cli_env.api_key)

    assert ids(await moat_json("webhook", "deliveries", webhook_id)) == delivered
    first = await moat_json("webhook", "deliveries", webhook_id, "--limit", "2")
    assert ids(first) == delivered[:2] and first["next_cursor"]
    rest = await moat_json(
        "webhook", "deliveries", webhook_id, "--limit", "10", "--cursor", first["next_cursor"]
    )
    assert ids(rest) == delivered[2:] and not set(elsewhere) & set(ids(rest))
    assert "more: --cursor " in await moat("webhook", "deliveries", webhook_id, "--limit", "1")


async def _approvals(stack: Stack, status: str, count: int) -> list[str]:
    at = datetime.now(UTC)
    made = [f"apr_{status[:3]}{n}{uuid.uuid4().hex[:16]}" for n in range(count)]
    async with stack.sessions.begin() as s:
        await tenancy.set_tenant(s, stack.tenant_id)
        for approval_id in made:
            s.add(
                ApprovalRow(
                    id=approval_id,
                    tenant_id=stack.tenant_id,
                    receipt_id=str(uuid.uuid4()),
                    workflow_id="wf",
                    status=status,
                    capability_id="demo.echo",
                    capability_version="1.0.0",
                    input_hash="sha256:" + "0" * 64,
                    policy_version=0,
                    requested_by="key:x",
                    input_key_id="k",
                    input_sealed=b"x",
                    requested_at=at,
                    expires_at=at + timedelta(hours=1),
                )
            )
    return sorted(made, reverse=True)


async def test_approvals_list_status_limit_and_cursor(cli_env: Stack) -> None:
    pending = await _approvals(cli_env, "pending", 3)
    rejected = await _approvals(cli_env, "rejected", 2)

    assert set(ids(await moat_json("approvals", "list"))) == {*pending, *rejected}
    assert ids(await moat_json("approvals", "list", "--status", "pending")) == pending
    assert ids(await moat_json("approvals", "list", "--status", "rejected")) == rejected
    first = await moat_json("approvals", "list", "--status", "pending", "--limit", "2")
    assert ids(first) == pending[:2] and first["next_cursor"]
    rest = await moat_json(
        "approvals", "list", "--status", "pending", "--cursor", first["next_cursor"]
    )
    assert ids(rest) == pending[2:]


async def test_policy_history_limit_and_cursor(cli_env: Stack) -> None:
    writer = await new_key(cli_env, ["policy:write"])
    for _ in range(3):
        put = await cli_env.http.put(
            f"{cli_env.url}/v1/policy",
            json={"mode": "standard"},
            headers={"Authorization": f"Bearer {writer}"},
        )
        assert put.status_code == 200, put.text
    every = ids(await moat_json("policy", "history", "--api-key", writer), "version")
    assert every == [3, 2, 1]
    first = await moat_json("policy", "history", "--api-key", writer, "--limit", "2")
    assert ids(first, "version") == [3, 2] and first["next_cursor"]
    rest = await moat_json(
        "policy", "history", "--api-key", writer, "--cursor", first["next_cursor"]
    )
    assert ids(rest, "version") == [1]


async def test_tenant_lists_show_the_named_tenant_only(cli_env: Stack) -> None:
    """``api-key``, ``connection``, ``probe`` and ``budget list TENANT``: the tenant argument
    is the filter, by id or by name."""
    stack = cli_env
    other_name = f"other-{uuid.uuid4().hex[:8]}"
    other, other_key = await stack.new_tenant(other_name)
    connection = await stack.add_connection(
        "http_bearer", "s3cret", config={"base_url": "https://api.example.com"}
    )
    probe = await stack.http.post(
        f"{stack.url}/v1/probes",
        json={"capability_id": "demo.echo", "interval_seconds": 3600},
        headers={"Authorization": f"Bearer {stack.api_key}"},
    )
    assert probe.status_code == 201, probe.text
    await moat("budget", "set", stack.tenant_id, "demo.echo", "7")

    mine = ids({"items": await moat_json("api-key", "list", stack.tenant_id)})
    theirs = ids({"items": await moat_json("api-key", "list", other_name)})
    assert mine == [stack.api_key.split("_")[1]]
    assert theirs == [other_key.split("_")[1]]
    assert ids({"items": await moat_json("connection", "list", stack.tenant_id)}) == [connection]
    assert await moat_json("connection", "list", other) == []
    assert ids({"items": await moat_json("probe", "list", stack.tenant_id)}) == [probe.json()["id"]]
    assert await moat_json("probe", "list", other) == []
    budgets = await moat_json("budget", "list", stack.tenant_id)
    assert [(b["capability_id"], b["limit"]) for b in budgets] == [("demo.echo", 7)]
    assert await moat_json("budget", "list", other) == []


async def test_trust_tenant_capability_window_and_synthetic(
    cli_env: Stack, provider: FakeProvider
) -> None:
    stack = cli_env
    for n in range(3):
        assert (await stack.execute("demo.echo", {"trust": n})).status_code == 200
    url = provider.script(f"/trust-{uuid.uuid4().hex}", Step(200, {"ok": True}))
    done = await stack.execute("http.request", {"method": "GET", "url": url})
    assert done.status_code == 200, done.text
    other, _ = await stack.new_tenant()
    await stack.client.execute_workflow(
        TRUST_REFRESH_WORKFLOW,
        TrustRefreshInput(tenant_id=stack.tenant_id),
        id=f"refresh-{uuid.uuid4().hex}",
        task_queue=stack.settings.task_queue,
    )

    def real(report: dict[str, Any]) -> dict[str, int]:
        return {s["capability_id"]: s["real"]["samples"] for s in report["scores"]}

    mine = await moat_json("trust", "--tenant", stack.tenant_id, "--window", "1h")
    assert real(mine) == {"demo.echo": 3, "http.request": 1}
    assert real(await moat_json("trust", "--tenant", other)) == {}
    everyone = real(await moat_json("trust", "--window", "1h"))
    assert everyone["demo.echo"] >= 3
    only = await moat_json(
        "trust", "--tenant", stack.tenant_id, "--window", "1h", "--capability", "http.request"
    )
    assert real(only) == {"http.request": 1}
    month = await moat_json("trust", "--tenant", stack.tenant_id, "--window", "30d")
    assert month["window"] == "30d" and mine["window"] == "1h"
    assert datetime.fromisoformat(month["since"]) < datetime.fromisoformat(mine["since"])
    # The table shows the real traffic, or with --synthetic the probes' (none here).
    args = ("trust", "--tenant", stack.tenant_id, "--window", "1h", "--capability", "demo.echo")
    row = next(line for line in (await moat(*args)).splitlines() if "demo.echo" in line)
    synthetic = await moat(*args, "--synthetic")
    row_synthetic = next(line for line in synthetic.splitlines() if "demo.echo" in line)
    assert " 3 " in row and " 0 " in row_synthetic and " 3 " not in row_synthetic
    assert "synthetic traffic" in synthetic
