"""``moat execute``: a short summary by default (status, receipt, replay, output, the run
in the Temporal UI), the whole envelope with ``--json``."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import httpx
import pytest
from moat_client import MoatClient
from rich.console import Console
from typer.testing import CliRunner

from schemas.settings import MoatSettings
from starter.cli import app as cli
from starter.cli import execute as execute_command
from starter.runtime import links
from tests.gateway.test_policy import new_key, put_policy
from tests.support.fakes import FakeProvider, Step
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
    assert "/namespaces/moat/workflows/exec%2F" in summary.output
    assert "idempotent replay" not in summary.output

    as_json = await asyncio.to_thread(runner.invoke, cli, [*args, "--json"])
    assert as_json.exit_code == 0, as_json.output
    envelope = json.loads(as_json.stdout)
    assert envelope["output"] == {"hello": "cli"}
    assert lines[0].split()[1] == envelope["receipt_id"]
    run_link = links.temporal_run(
        f"http://127.0.0.1:{MoatSettings().temporal_ui_port}",
        "moat",
        envelope["workflow_id"],
        envelope["run_id"],
    )
    assert f"run: {run_link}" in summary.output

    again = await asyncio.to_thread(runner.invoke, cli, args)
    assert "idempotent replay" in again.output and '"hello": "cli"' in again.output


async def test_a_call_held_for_approval_names_its_approval(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOAT_GATEWAY_URL", stack.url)
    monkeypatch.setenv("MOAT_API_KEY", stack.api_key)
    monkeypatch.setenv("COLUMNS", "200")
    strict = {"mode": "strict", "rules": [{"capability": "demo.echo", "requires_approval": True}]}
    await put_policy(stack, await new_key(stack, ["policy:write"]), strict)
    args = ["execute", "demo.echo", "--input", '{"to":"ops"}', "--key", "cli-held"]
    held = await asyncio.to_thread(CliRunner().invoke, cli, args)
    assert held.exit_code == 1, held.output  # not executed (yet)
    assert held.output.startswith("accepted  ")
    assert "awaiting approval apr_" in held.output and "moat approvals show apr_" in held.output


async def test_on_a_terminal_a_spinner_shows_the_time_waited(
    stack: Stack, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOAT_GATEWAY_URL", stack.url)
    monkeypatch.setenv("MOAT_API_KEY", stack.api_key)
    screen = io.StringIO()
    monkeypatch.setattr(
        execute_command, "out", Console(file=screen, force_terminal=True, width=120)
    )
    url = provider.script("/slow", Step(200, {"done": True}, delay=1.6))
    request = json.dumps({"method": "GET", "url": url})
    args = ["execute", "http.request", "--input", request, "--key", "cli-slow"]

    result = await asyncio.to_thread(CliRunner().invoke, cli, args)
    assert result.exit_code == 0, result.output
    shown = screen.getvalue()
    assert "waiting for the run" in shown
    assert "0:00:01" in shown  # the clock moved while the call blocked
    assert "executed" in shown


def test_execute_reads_past_the_gateway_wait_it_asks_for(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``moat execute`` asks for the gateway's wait (``Prefer: wait=N``) and reads its
    answer for longer, so a slow first run is never sent again and shown as a replay."""
    monkeypatch.setenv("MOAT_HOME", str(tmp_path))
    monkeypatch.setenv("MOAT_WAIT_SECONDS", "45")
    seen: list[tuple[str | None, float]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append((request.headers.get("Prefer"), request.extensions["timeout"]["read"]))
        envelope = {"receipt_id": "r", "trace_id": "t", "status": "executed", "output": {}}
        return httpx.Response(200, json=envelope)

    def client(settings: MoatSettings) -> MoatClient:
        return MoatClient("http://127.0.0.1:9", "moat_k_s", transport=httpx.MockTransport(answer))

    monkeypatch.setattr(execute_command, "agent_client", client)
    done = CliRunner().invoke(cli, ["execute", "demo.echo", "--input", "{}", "--json"])
    assert done.exit_code == 0, done.output
    assert seen == [("wait=45", 55.0)]
