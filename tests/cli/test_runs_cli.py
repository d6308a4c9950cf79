"""``moat runs rebuild`` and ``moat runs show`` against the real database."""

from __future__ import annotations

import asyncio
import json

import pytest
from sqlalchemy import func, select, update
from typer.testing import CliRunner

from starter.cli.runs import runs_app
from store.models import ReceiptRow, RunRow
from tests.support.stack import Stack

runner = CliRunner()


@pytest.fixture
def cli_env(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Stack:
    monkeypatch.setenv("MOAT_DATABASE_URL", stack.settings.database_url or "")
    monkeypatch.setenv("COLUMNS", "200")
    return stack


async def test_rebuild_verify_reports_and_repairs(cli_env: Stack) -> None:
    stack = cli_env
    first = (await stack.execute("demo.echo", {"cli": 1}, key="cli-1")).json()
    result = await _invoke(["rebuild", "--tenant", stack.tenant_id, "--verify"])
    assert result.exit_code == 0, result.output
    assert "0 differ" in result.output

    async with stack.sessions.begin() as s:
        await s.execute(
            update(RunRow).filter_by(receipt_id=first["receipt_id"]).values(total_steps=99)
        )
    result = await _invoke(["rebuild", "--tenant", stack.tenant_id, "--verify"])
    assert result.exit_code == 1
    assert first["receipt_id"] in result.output and "total_steps" in result.output

    result = await _invoke(["rebuild", "--tenant", stack.tenant_id])
    assert result.exit_code == 0 and "rebuilt" in result.output
    result = await _invoke(["rebuild", "--tenant", stack.tenant_id, "--verify"])
    assert result.exit_code == 0, result.output


async def test_show_prints_the_causal_tree(cli_env: Stack) -> None:
    body = (await cli_env.execute("demo.echo", {"tree": 1}, key="tree")).json()
    result = await _invoke(["show", body["receipt_id"], "--tree"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    order = [
        "SIGNAL_RECEIVED",
        "SIGNAL_PROCESSING_STARTED",
        "RUN_STARTED",
        "POLICY_EVALUATED",
        "EFFECT_REQUESTED",
        "STEP_STARTED",
        "STEP_COMPLETED",
        "EFFECT_COMPLETED",
        "RUN_COMPLETED",
        "SIGNAL_PROCESSED",
    ]
    positions = [next(i for i, line in enumerate(lines) if name in line) for name in order]
    assert positions == sorted(positions)
    # Each event sits one level under the event that caused it.
    indents = [len(lines[p]) - len(lines[p].lstrip(" │├└─")) for p in positions]
    assert indents == sorted(indents) and len(set(indents)) == len(order)
    assert "status COMPLETED" in result.output


async def test_show_prints_the_event_log_as_a_table_or_json(cli_env: Stack) -> None:
    body = (await cli_env.execute("demo.echo", {"table": 1}, key="table")).json()
    table = await _invoke(["show", body["receipt_id"]])
    assert table.exit_code == 0, table.output
    # A row's first cell is its sequence number; wrapped data continues on blank-numbered lines.
    cells = [line.split("│") for line in table.output.splitlines() if line.startswith("│")]
    rows = [row for row in cells if row[1].strip().isdigit()]
    names = [row[3].strip() for row in rows]
    assert names[0] == "SIGNAL_RECEIVED" and "RUN_COMPLETED" in names
    sequence = [int(row[1]) for row in rows]
    assert sequence == sorted(sequence)
    assert "status COMPLETED" in table.output

    as_json = await _invoke(["show", body["receipt_id"], "--json"])
    assert as_json.exit_code == 0, as_json.output
    log = json.loads(as_json.stdout)
    assert log["receipt_id"] == body["receipt_id"]
    assert [e["event_type"] for e in log["events"]] == names
    assert log["run"]["status"] == "COMPLETED"


async def test_show_refuses_a_prefix_that_starts_receipts_of_two_tenants(cli_env: Stack) -> None:
    stack = cli_env
    other_tenant, other_key = await stack.new_tenant()
    # uuid7s made moments apart share their time's digits, but receipts of other tests made
    # in the same window may share them too: a pair whose prefix starts only those two.
    for attempt in range(8):
        mine = (await stack.execute("demo.echo", {"prefix": 1}, key=f"prefix-a{attempt}")).json()
        theirs = (
            await stack.execute("demo.echo", {"prefix": 2}, key=f"p-b{attempt}", api_key=other_key)
        ).json()
        a, b = mine["receipt_id"], theirs["receipt_id"]
        shared = next(i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)
        async with stack.sessions() as s:
            starting = await s.scalar(
                select(func.count())
                .select_from(ReceiptRow)
                .where(ReceiptRow.id.startswith(a[:shared]))
            )
        if shared >= 6 and starting == 2:
            break
        await asyncio.sleep(1.1)  # the next pair out of this pair's window of time
    else:
        pytest.fail(f"no pair of receipts alone under a common prefix: {a}, {b}")
    result = await _invoke(["show", a[:shared]])
    assert result.exit_code != 0
    assert "starts receipt ids of" in result.output and a in result.output, result.output
    assert b in result.output
    # Named with its tenant, or long enough to start one receipt, it is found.
    narrowed = await _invoke(["show", a[:shared], "--tenant", stack.tenant_id])
    assert narrowed.exit_code == 0 and a in narrowed.output, narrowed.output
    whole = await _invoke(["show", b[:24], "--json"])
    assert whole.exit_code == 0 and json.loads(whole.stdout)["receipt_id"] == b
    assert other_tenant != stack.tenant_id


async def _invoke(args: list[str]):  # type: ignore[no-untyped-def]
    import asyncio

    # The command runs its own event loop; keep it off the test's loop.
    return await asyncio.to_thread(runner.invoke, runs_app, args)


async def test_show_names_a_plan_and_its_checkpoints(cli_env: Stack) -> None:
    plan = {
        "schema_version": "1",
        "steps": [
            {"id": "a", "capability_id": "demo.echo", "input": {"n": 1}},
            {"id": "b", "capability_id": "demo.echo", "input": {"n": "${steps.a.output.n}"}},
        ],
    }
    headers = {"Authorization": f"Bearer {cli_env.api_key}"}
    body = (await cli_env.http.post(f"{cli_env.url}/v1/plans", json=plan, headers=headers)).json()
    result = await _invoke(["show", body["plan_id"], "--tree"])
    assert result.exit_code == 0, result.output
    assert f"plan {body['plan_id']}" in result.output
    assert "plan: status COMPLETED, checkpoints 2" in result.output
