"""``moat people``: a tenant's people through the gateway, as a table (or JSON); a key
giving a scope it lacks is refused in one error line saying what to do."""

from __future__ import annotations

import asyncio
import json

import pytest
from rich.console import Console
from typer.testing import CliRunner

from starter.cli import app as cli
from starter.cli import people as people_command
from tests.gateway.test_scopes import new_key
from tests.support.stack import Stack


async def test_people_commands(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    key = await new_key(stack, stack.tenant_id, ["people:*", "approvals:read"])
    monkeypatch.setenv("MOAT_GATEWAY_URL", stack.url)
    monkeypatch.setenv("MOAT_API_KEY", key["api_key"])
    monkeypatch.setattr(people_command, "out", Console(width=240))
    runner = CliRunner()

    async def moat(*args: str, exit_code: int = 0) -> str:
        result = await asyncio.to_thread(runner.invoke, cli, list(args))
        assert result.exit_code == exit_code, result.output
        return result.output

    added = await moat(
        "people", "add", "ada", "--name", "Ada", "--scope", "approvals:read",
        "--oidc-issuer", "https://id.example.com", "--oidc-subject", "248289761001",
        "--json",
    )  # fmt: skip
    person = json.loads(added)
    assert (person["actor"], person["scopes"]) == ("person:ada", ["approvals:read"])
    listed = await moat("people", "list")
    assert "person:ada" in listed and "248289761001" in listed and "active" in listed
    refused = await moat("people", "add", "bob", "--scope", "approvals:write", exit_code=1)
    assert "scope_missing" in refused and "only scopes it holds" in refused
    assert "disabled at" in await moat("people", "disable", "ada")
    assert "disabled" in await moat("people", "list")
