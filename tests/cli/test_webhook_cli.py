"""``moat webhook`` and ``moat dlq``: the tenant's subscriptions and dead letters through
the gateway, as tables (or JSON), refusals as one error line."""

from __future__ import annotations

import asyncio
import json

import pytest
from rich.console import Console
from typer.testing import CliRunner

from starter.cli import app as cli
from starter.cli import dead_letters as dlq_command
from starter.cli import webhooks as webhook_command
from tests.support.stack import Stack


async def test_webhook_and_dlq_commands(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOAT_GATEWAY_URL", stack.url)
    monkeypatch.setenv("MOAT_API_KEY", stack.api_key)
    for module in (webhook_command, dlq_command):  # wide enough for whole ids
        monkeypatch.setattr(module, "out", Console(width=240))
    runner = CliRunner()

    async def moat(*args: str) -> str:
        # The CLI blocks; the gateway answers on this test's loop, so it runs in a thread.
        result = await asyncio.to_thread(runner.invoke, cli, list(args))
        assert result.exit_code == 0, result.output
        return result.output

    added = json.loads(
        await moat(
            "webhook", "add", "https://hooks.example.com/in", "-e", "execution.failed", "--json"
        )
    )
    assert added["secret"].startswith("whsec_")
    listed = await moat("webhook", "list")
    assert added["id"] in listed and "execution.failed" in listed and "whsec_" not in listed
    rotated = await moat("webhook", "rotate", added["id"])
    assert "signing secret: whsec_" in rotated and "signs too until" in rotated
    assert "0 open dead letters" in await moat("dlq", "list")
    await moat("webhook", "remove", added["id"])
    assert added["id"] not in await moat("webhook", "list")

    refused = await asyncio.to_thread(runner.invoke, cli, ["webhook", "rotate", added["id"]])
    assert refused.exit_code == 1
    assert "webhook_not_found" in refused.output and "moat webhook list" in refused.output
