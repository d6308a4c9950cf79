"""``moat mcp``: serve the tenant's capabilities to MCP clients (stdio, or Streamable HTTP
with ``--http``), through the gateway at ``MOAT_URL`` (else the local stack's)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Annotated

import typer

from starter.cli.output import fail
from starter.devstack.home import demo_api_key
from starter.devstack.ports import local_settings


def mcp(
    http: Annotated[
        bool, typer.Option("--http", help="Streamable HTTP at /mcp instead of stdio.")
    ] = False,
    port: Annotated[int, typer.Option("--port", help="HTTP port (with --http).")] = 8765,
    host: Annotated[str, typer.Option("--host", help="HTTP address (with --http).")] = "127.0.0.1",
    url: Annotated[
        str | None, typer.Option("--url", help="The gateway (default: MOAT_URL, else local).")
    ] = None,
    wait: Annotated[
        float | None,
        typer.Option("--wait", help="Seconds the gateway waits for a run (Prefer: wait)."),
    ] = None,
) -> None:
    """Serve Moat's capabilities as MCP tools. Over stdio the tools run as the tenant of
    MOAT_API_KEY; over HTTP each client sends its tenant's API key as a bearer token."""
    from moat_client import configured

    from starter.mcp import MoatTools, serve_http, serve_stdio

    settings = local_settings()
    gateway, api_key = configured(url)
    gateway = gateway or settings.local_gateway_url
    if not http:
        api_key = api_key or demo_api_key(settings)
        if not api_key:
            raise fail(
                "no API key",
                "set MOAT_API_KEY to the tenant's key, or run `moat up` for the demo tenant's",
                code=2,
            )
    tools = MoatTools(gateway, api_key, wait_seconds=wait)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve_http(tools, host, port) if http else serve_stdio(tools))
