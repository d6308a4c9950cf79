"""``moat mcp`` on the live stack, through the ``mcp`` SDK's own client: over stdio (a
desktop agent's way) and over Streamable HTTP with the tenant's API key as bearer token.
The same call twice is one effect and one receipt; a bad argument is a tool error naming
the field; an accepted run, or one held for a person's approval, is reported with the id to
ask ``moat_execution_status`` about."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from starter.devstack import free_port
from starter.mcp import MoatTools, build_server
from tests.gateway.test_policy import bearer, new_key, put_policy
from tests.support.fakes import FakeProvider, Step
from tests.support.stack import Stack

MOAT = str(Path(sys.executable).parent / "moat")


def environment(stack: Stack, home: Path) -> dict[str, str]:
    return {"MOAT_URL": stack.url, "MOAT_API_KEY": stack.api_key, "MOAT_HOME": str(home)}


async def check_tools(client: Client, stack: Stack, provider: FakeProvider) -> None:
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert {"demo_echo", "http_request", "moat_execution_status"} <= set(tools)
    http_tool = tools["http_request"]
    assert "url" in http_tool.input_schema["properties"]
    assert "idempotency_key" in http_tool.input_schema["properties"]
    assert "idempotency_key" not in http_tool.input_schema.get("required", [])
    assert http_tool.title == "http.request" and http_tool.description

    url = provider.script(f"/mcp-{id(client)}")
    arguments = {"method": "POST", "url": url, "json": {"n": 1}}
    first = await client.call_tool("http_request", arguments)
    again = await client.call_tool("http_request", arguments)
    assert not first.is_error and not again.is_error, first.content
    envelope: dict[str, Any] = first.structured_content
    assert envelope["status"] == "executed" and envelope["output"]["status"] == 200
    assert again.structured_content["receipt_id"] == envelope["receipt_id"]
    assert len(provider.effects_on(url.removeprefix(provider.base_url))) == 1

    bad = await client.call_tool("http_request", {"method": "POST", "url": 42})
    assert bad.is_error
    assert bad.structured_content["error"]["code"] == "schema_validation_failed"
    headline = bad.content[0].text  # type: ignore[union-attr]
    assert headline.startswith("schema_validation_failed") and "url" in headline


async def check_held_for_approval(client: Client, stack: Stack, provider: FakeProvider) -> None:
    """Under a strict policy: the call answers the pending approval, and once a person
    approved it (another key), the status tool answers the finished run."""
    strict = {"mode": "strict", "rules": [{"capability": "http.*", "requires_approval": True}]}
    await put_policy(stack, await new_key(stack, ["policy:write"]), strict)
    url = provider.script("/mcp-held", Step(201, {"ok": True}))
    held = await client.call_tool("http_request", {"method": "POST", "url": url})
    assert not held.is_error, held.content
    envelope: dict[str, Any] = held.structured_content
    approval = envelope["approval"]
    assert envelope["status"] == "accepted" and approval["status"] == "pending"
    note = held.content[0].text  # type: ignore[union-attr]
    assert approval["id"] in note and "moat_execution_status" in note
    receipt_id = envelope["receipt_id"]
    asked = await client.call_tool("moat_execution_status", {"receipt_id": receipt_id})
    assert asked.structured_content["approval"]["id"] == approval["id"]
    assert provider.effects_on("/mcp-held") == []

    decided = await stack.http.post(
        f"{stack.url}/v1/approvals/{approval['id']}/approve",
        json={"input_hash": approval["input_hash"], "policy_version": approval["policy_version"]},
        headers=bearer(await new_key(stack, ["approvals:write"])),
    )
    assert decided.status_code == 200, decided.text
    for _ in range(200):
        status = await client.call_tool("moat_execution_status", {"receipt_id": receipt_id})
        if status.structured_content["status"] != "accepted":
            break
        await asyncio.sleep(0.1)
    assert not status.is_error and status.structured_content["status"] == "executed"
    assert status.structured_content["output"]["status"] == 201
    assert len(provider.effects_on("/mcp-held")) == 1


@pytest.mark.timeout(120)
async def test_stdio(stack: Stack, provider: FakeProvider, tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=MOAT, args=["mcp"], env=environment(stack, tmp_path), cwd=str(tmp_path)
    )
    async with Client(params) as client:
        await check_tools(client, stack, provider)
        keyed = await client.call_tool("demo_echo", {"a": 1, "idempotency_key": "mcp-k1"})
        assert keyed.structured_content["idempotency_key"] == "mcp-k1"
        assert keyed.structured_content["output"] == {"a": 1}  # the key is not input
        reused = await client.call_tool("demo_echo", {"a": 2, "idempotency_key": "mcp-k1"})
        assert reused.is_error
        assert reused.structured_content["error"]["code"] == "idempotency_key_reused"
        await check_held_for_approval(client, stack, provider)


@asynccontextmanager
async def http_server(stack: Stack, home: Path, *extra: str) -> AsyncIterator[str]:
    port = free_port()
    env = {"PATH": "/usr/bin:/bin", **environment(stack, home)}
    del env["MOAT_API_KEY"]  # over HTTP the key is each client's bearer token
    process = await asyncio.create_subprocess_exec(
        MOAT, "mcp", "--http", "--port", str(port), *extra, env=env, cwd=home
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        async with httpx.AsyncClient() as probe:
            for _ in range(300):
                try:
                    await probe.get(url)
                    break
                except httpx.TransportError:
                    assert process.returncode is None, "moat mcp --http exited"
                    await asyncio.sleep(0.1)
        yield url
    finally:
        process.terminate()
        await process.wait()


@pytest.mark.timeout(120)
async def test_streamable_http_with_the_api_key_as_bearer_token(
    stack: Stack, provider: FakeProvider, tmp_path: Path
) -> None:
    async with http_server(stack, tmp_path) as url:
        async with httpx.AsyncClient() as plain:
            for headers in ({}, {"Authorization": "Bearer moat_nobody_nothing"}):
                refused = await plain.post(url, json={}, headers=headers)
                assert refused.status_code == 401, refused.text

        bearer = {"Authorization": f"Bearer {stack.api_key}"}
        async with (
            httpx2.AsyncClient(headers=bearer, timeout=60) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            await check_tools(client, stack, provider)


async def test_an_accepted_run_is_reported_with_the_id_to_ask_about(stack: Stack) -> None:
    """In process (the SDK's client on the server object), with a gateway told not to wait:
    every new run answers accepted."""
    tools = MoatTools(stack.url, stack.api_key, wait_seconds=0)
    try:
        async with Client(build_server(tools)) as client:
            pending = await client.call_tool("demo_echo", {"b": 1})
            assert not pending.is_error
            assert pending.structured_content["status"] == "accepted"
            receipt_id = pending.structured_content["receipt_id"]
            assert "moat_execution_status" in pending.content[0].text  # type: ignore[union-attr]
            for _ in range(100):
                status = await client.call_tool("moat_execution_status", {"receipt_id": receipt_id})
                if status.structured_content["status"] != "accepted":
                    break
                await asyncio.sleep(0.1)
            assert status.structured_content["status"] == "executed"
            assert status.structured_content["output"] == {"b": 1}
            # Asked again, the same call is the same execution: its stored receipt.
            again = await client.call_tool("demo_echo", {"b": 1})
            assert again.structured_content["receipt_id"] == receipt_id
            assert again.structured_content["status"] == "executed"
    finally:
        await tools.aclose()
