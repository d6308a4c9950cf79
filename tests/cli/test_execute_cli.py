"""``moat execute``: a short summary by default (status, receipt, replay, output, the run
in the Temporal UI), the whole envelope with ``--json``."""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.testing import CliRunner

from starter.cli import app as cli
from tests.support.stack import Stack


async def test_summary_and_json(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOAT_GATEWAY_URL", stack.url)
    monkeypatch.setenv("MOAT_API_KEY", stack.api_key)
    runner = CliRunner()
    args = ["execute", "demo.echo", "--input", '{"hello":"cli"}', "--key", "cli-1"]

    # The client blocks; the gateway answers on this test's loop, so it runs in a thread.
    summary = await asyncio.to_thread(runner.invoke, cli, args)
    assert summary.exit_code == 0, summary.output
    lines = summary.output.splitlines()
    assert lines[0].startswith("executed  ")
    assert '"hello": "cli"' in summary.output
    assert "/namespaces/moat/workflows/exec/" in summary.output
    assert "idempotent replay" not in summary.output

    as_json = await asyncio.to_thread(runner.invoke, cli, [*args, "--json"])
    assert as_json.exit_code == 0, as_json.output
    envelope = json.loads(as_json.stdout)
    assert envelope["output"] == {"hello": "cli"}
    assert lines[0].split()[1] == envelope["receipt_id"]
    assert f"{envelope['workflow_id']}/{envelope['run_id']}" in summary.output

    again = await asyncio.to_thread(runner.invoke, cli, args)
    assert "idempotent replay" in again.output and '"hello": "cli"' in again.output
