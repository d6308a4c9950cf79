"""``moat mcp``: serve the tenant's capabilities to MCP clients (stdio, or Streamable HTTP
with ``--http``), through the gateway at ``MOAT_URL`` (else the local stack's)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Annotated

import typer

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
    approve_in_session: Annotated[
        bool,
        typer.Option(
            "--approve-in-session",
            help="Ask the requester in their own session (elicitation) where the policy's "
            "rule says approve_in_session. Needs the gateway's settings: its database, "
            "Temporal and start keyring.",
        ),
    ] = False,
) -> None:
    """Serve Moat's capabilities as MCP tools. Over stdio the tools run as the tenant of
    the API key (--api-key, MOAT_API_KEY, the profile's, the demo key); over HTTP each
    client sends its tenant's API key as a bearer token."""
    from moat_client import configured

    from starter.cli import identity
    from starter.cli.tenant_api import key_of
    from starter.mcp import InSessionApprovals, MoatTools, serve_http, serve_stdio
    from starter.runtime import observability

    settings = local_settings()
    # Its spans, exported when OTEL_EXPORTER_OTLP_ENDPOINT is set; logs go to stderr.
    observability.setup("moat-mcp", log_format=settings.log_format)
    gateway, _ = configured(url)
    gateway = gateway or identity.gateway_url(settings).value or settings.local_gateway_url
    api_key = None if http else key_of(settings).value

    async def serve() -> None:
        async with contextlib.AsyncExitStack() as stack:
            door = None
            if approve_in_session:
                door = await stack.enter_async_context(InSessionApprovals.connected(settings))
            tools = MoatTools(gateway, api_key, wait_seconds=wait, in_session=door)
            await (serve_http(tools, host, port) if http else serve_stdio(tools))

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())
