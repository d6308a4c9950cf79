"""``moat receipts list`` and ``moat receipts show``: through the gateway with the tenant's
API key, a table by default and the gateway's JSON with ``--json``."""

from __future__ import annotations

import asyncio
import json

import pytest
from click.testing import Result
from typer.testing import CliRunner

from starter.cli import app as cli
from tests.support.stack import Stack

runner = CliRunner()


@pytest.fixture
def cli_env(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Stack:
    monkeypatch.setenv("MOAT_GATEWAY_URL", stack.url)
    monkeypatch.setenv("MOAT_API_KEY", stack.api_key)
    monkeypatch.setenv("COLUMNS", "250")
    return stack


async def test_list_filters_and_json(cli_env: Stack) -> None:
    stack = cli_env
    echoed = [(await stack.execute("demo.echo", {"n": n}, key=f"rl-{n}")).json() for n in range(3)]
    ids = [body["receipt_id"] for body in echoed]

    table = await _invoke(["receipts", "list", "--capability", "demo.echo"])
    assert table.exit_code == 0, table.output
    for receipt_id in ids:
        assert receipt_id in table.output
    assert "demo.echo@" in table.output and "success" in table.output

    limited = await _invoke(["receipts", "list", "--limit", "2", "--json"])
    assert limited.exit_code == 0, limited.output
    page = json.loads(limited.stdout)
    assert [r["id"] for r in page["items"]] == ids[::-1][:2]
    assert page["next_cursor"]

    failed = await _invoke(["receipts", "list", "--status", "failure", "--json"])
    assert failed.exit_code == 0, failed.output
    assert json.loads(failed.stdout)["items"] == []

    refused = await _invoke(["receipts", "list", "--status", "nonsense"])
    assert refused.exit_code == 1
    assert refused.stderr.startswith("error: ") and "hint: " in refused.stderr
    refused = await _invoke(["receipts", "list", "--status", "nonsense", "--json"])
    assert refused.exit_code == 1
    assert json.loads(refused.stdout)["error"]["http_status"] in (400, 422)


async def test_show_table_and_json(cli_env: Stack) -> None:
    body = (await cli_env.execute("demo.echo", {"show": 1}, key="rs-1")).json()
    receipt_id = body["receipt_id"]

    table = await _invoke(["receipts", "show", receipt_id])
    assert table.exit_code == 0, table.output
    assert receipt_id in table.output
    assert body["receipt"]["output_hash"] in table.output

    as_json = await _invoke(["receipts", "show", receipt_id, "--json"])
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout) == body["receipt"]

    missing = await _invoke(["receipts", "show", "rcpt_missing"])
    assert missing.exit_code == 1
    assert missing.stderr.startswith("error: receipt_not_found: "), missing.stderr
    missing = await _invoke(["receipts", "show", "rcpt_missing", "--json"])
    assert missing.exit_code == 1
    assert json.loads(missing.stdout)["error"]["http_status"] == 404


async def _invoke(args: list[str]) -> Result:
    # The client blocks; the gateway answers on this test's loop, so it runs in a thread.
    return await asyncio.to_thread(runner.invoke, cli, args)
