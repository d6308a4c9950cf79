"""``moat trust`` and ``moat probe`` against the real database and Temporal."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from click.testing import Result
from typer.testing import CliRunner

from schemas.names import TRUST_REFRESH_WORKFLOW
from schemas.probes import TrustRefreshInput
from starter.cli.root import app
from tests.support.stack import Stack

runner = CliRunner()


@pytest.fixture
def cli_env(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Stack:
    monkeypatch.setenv("MOAT_DATABASE_URL", stack.settings.database_url or "")
    monkeypatch.setenv("MOAT_HOME", str(stack.settings.home))
    monkeypatch.setenv("MOAT_TASK_QUEUE", stack.settings.task_queue)
    monkeypatch.setenv("MOAT_TEMPORAL_ADDRESS", stack.client.service_client.config.target_host)
    monkeypatch.setenv("COLUMNS", "200")
    return stack


async def _invoke(args: list[str]) -> Result:
    return await asyncio.to_thread(runner.invoke, app, args)


async def test_trust_table_and_probe_commands(cli_env: Stack) -> None:
    stack = cli_env
    for i in range(2):
        assert (await stack.execute("demo.echo", {"cli": i})).status_code == 200
    await stack.client.execute_workflow(
        TRUST_REFRESH_WORKFLOW,
        TrustRefreshInput(tenant_id=stack.tenant_id),
        id=f"refresh-{uuid.uuid4().hex}",
        task_queue=stack.settings.task_queue,
    )
    table = await _invoke(["trust", "--tenant", stack.tenant_id, "--window", "1h"])
    assert table.exit_code == 0, table.output
    row = next(line for line in table.output.splitlines() if "demo.echo" in line)
    assert "1.0.0" in row and "n/a" in row and " 2 " in row  # 2 samples: too few for a rate

    added = await _invoke(
        ["probe", "add", stack.tenant_id, "demo.echo", "--every", "3600", "--json"]
    )
    assert added.exit_code == 0, added.output
    probe = json.loads(added.output)
    assert probe["input"] == {"probe": "demo.echo"} and probe["paused"] is False
    paused = await _invoke(["probe", "pause", stack.tenant_id, probe["id"]])
    assert paused.exit_code == 0 and "paused" in paused.output
    listed = await _invoke(["probe", "list", stack.tenant_id, "--json"])
    assert [p["paused"] for p in json.loads(listed.output)] == [True]
    removed = await _invoke(["probe", "remove", stack.tenant_id, probe["id"]])
    assert removed.exit_code == 0, removed.output
    missing = await _invoke(["probe", "remove", stack.tenant_id, probe["id"]])
    assert missing.exit_code == 1 and "No probe" in missing.output

    refused = await _invoke(
        [
            "probe",
            "add",
            stack.tenant_id,
            "http.request",
            "--input",
            '{"method": "DELETE", "url": "https://example.com/x"}',
        ]
    )
    assert refused.exit_code == 1 and "cannot be probed" in refused.output
