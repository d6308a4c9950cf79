"""Installed, the package adds ``acme.create_ticket`` to Moat without a change to Moat's
code: the catalog, ``GET /v1/capabilities``, the MCP server's tools and ``moat
capabilities`` list it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from moat.testing import Stack, StackFactory
from schemas.capabilities import CapabilityCatalog
from schemas.registry import installed
from starter.cli import app as cli
from starter.mcp import MoatTools


def test_the_entry_point_declares_the_capability() -> None:
    ids = {c.spec.id for c in installed()}
    assert "acme.create_ticket" in ids and "http.request" in ids
    spec = CapabilityCatalog().get("acme.create_ticket")
    assert spec is not None and spec.idempotency == "reconcile"


@pytest.mark.asyncio(loop_scope="session")
async def test_the_gateway_lists_it(moat_make_stack: StackFactory) -> None:
    async with moat_make_stack() as stack:
        listed = await _capabilities(stack)
    assert "acme.create_ticket" in listed
    assert listed["acme.create_ticket"]["input_schema"]["required"] == ["subject", "customer_id"]


async def _capabilities(stack: Stack) -> dict[str, dict]:
    answer = await stack.http.get(
        f"{stack.url}/v1/capabilities", headers={"Authorization": f"Bearer {stack.api_key}"}
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    items = body.get("capabilities", body) if isinstance(body, dict) else body
    return {c["id"]: c for c in items}


@pytest.mark.asyncio(loop_scope="session")
async def test_the_mcp_server_offers_it_as_a_tool(moat_make_stack: StackFactory) -> None:
    async with moat_make_stack() as stack:
        tools = MoatTools(stack.url, stack.api_key)
        listed = {tool.name: tool for tool in (await tools.list_tools(None)).tools}
    assert "acme_create_ticket" in listed
    assert listed["acme_create_ticket"].title == "acme.create_ticket"


@pytest.mark.asyncio(loop_scope="session")
async def test_the_cli_shows_it(
    moat_make_stack: StackFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    async with moat_make_stack() as stack:
        monkeypatch.setenv("MOAT_HOME", str(tmp_path))
        monkeypatch.setenv("MOAT_GATEWAY_URL", stack.url)
        monkeypatch.setenv("MOAT_API_KEY", stack.api_key)
        # The CLI blocks; the gateway answers on this test's loop, so it runs in a thread.
        shown = await asyncio.to_thread(
            CliRunner().invoke, cli, ["capabilities", "acme.create_ticket", "--json"]
        )
    assert shown.exit_code == 0, shown.output
    [listed] = json.loads(shown.stdout)
    assert listed["id"] == "acme.create_ticket" and listed["idempotency"] == "reconcile"
