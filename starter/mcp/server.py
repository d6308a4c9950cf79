"""The MCP server: lists the catalog's capabilities as tools and executes a tool call
through the gateway with the agents' client, so every call is an ordinary Moat execution
(idempotent, policy-checked, with a receipt); ``moat_run_plan`` runs several as one plan.

Over stdio it speaks for the tenant of ``MOAT_API_KEY``. Over Streamable HTTP each request
carries the tenant's API key as a bearer token, checked with the gateway before the MCP
session sees it, and calls run with that key: one server can serve several tenants, and a
revoked key stops working at once.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import httpx
import mcp_types as types
from mcp.server import Server
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from moat_client import AsyncMoatClient, CapabilityInfo, MoatError, RetryPolicy, Unauthenticated

from schemas.ids import is_receipt_id
from starter.mcp.tools import (
    CONNECTION_ARGUMENT,
    KEY_ARGUMENT,
    PLAN_TOOL,
    PLAN_TOOL_SPEC,
    STATUS_TOOL,
    STATUS_TOOL_SPEC,
    derived_key,
    derived_plan_key,
    error_of,
    needs_connection,
    plan_result_of,
    result_of,
    tool_name,
    tool_of,
)

BAD_RECEIPT_ID = (
    "receipt_id must be the receipt_id a tool call answered: a UUID in lower case, such as "
    "0190a2b4-5c6d-7e8f-9a0b-1c2d3e4f5a6b"
)
# A verified bearer token is trusted this long before the gateway is asked again; the
# gateway checks the key on every call anyway.
TOKEN_CACHE_SECONDS = 30.0


class MoatTools:
    """The tools of one gateway: the catalog, and each call as an execution."""

    def __init__(
        self,
        url: str,
        api_key: str | None,
        *,
        wait_seconds: float | None = None,
        retry: RetryPolicy | None = None,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.url = url
        self._api_key = api_key
        self._wait_seconds = wait_seconds
        self._retry = retry or RetryPolicy(deadline=60.0)
        self._http = http or httpx.AsyncClient(timeout=30.0)
        self._catalog: dict[str, CapabilityInfo] = {}
        self._verified: dict[str, float] = {}

    async def aclose(self) -> None:
        await self._http.aclose()

    def client(self, api_key: str | None) -> AsyncMoatClient:
        return AsyncMoatClient(
            self.url, api_key or self._api_key, http_client=self._http, retry=self._retry
        )

    async def catalog(self, api_key: str | None) -> dict[str, CapabilityInfo]:
        capabilities = await self.client(api_key).capabilities()
        catalog: dict[str, CapabilityInfo] = {}
        for capability in capabilities:
            # Several versions of one capability are one tool: the gateway's default version.
            catalog.setdefault(tool_name(capability.id), capability)
        self._catalog = catalog
        return catalog

    async def list_tools(self, api_key: str | None) -> types.ListToolsResult:
        catalog = await self.catalog(api_key)
        return types.ListToolsResult(
            tools=[*(tool_of(c) for c in catalog.values()), STATUS_TOOL_SPEC, PLAN_TOOL_SPEC]
        )

    async def call_tool(
        self, api_key: str | None, name: str, arguments: dict[str, Any]
    ) -> types.CallToolResult:
        client = self.client(api_key)
        try:
            if name == PLAN_TOOL:
                return await self._run_plan(client, arguments)
            if name == STATUS_TOOL:
                receipt_id = arguments.get("receipt_id")
                if not isinstance(receipt_id, str) or not receipt_id:
                    raise MCPError(code=types.INVALID_PARAMS, message="receipt_id is required")
                if not is_receipt_id(receipt_id):
                    # It becomes part of a URL path: anything else could name another route.
                    raise MCPError(code=types.INVALID_PARAMS, message=BAD_RECEIPT_ID)
                return result_of(await client.get_execution(receipt_id))
            capability = self._catalog.get(name) or (await self.catalog(api_key)).get(name)
            if capability is None:
                raise MCPError(code=types.INVALID_PARAMS, message=f"unknown tool: {name}")
            given = dict(arguments)
            key = given.pop(KEY_ARGUMENT, None)
            connection = (
                given.pop(CONNECTION_ARGUMENT, None) if needs_connection(capability) else None
            )
            connection = connection if isinstance(connection, str) and connection else None
            if not isinstance(key, str) or not key:
                key = derived_key(capability.id, given, connection)
            result = await client.execute(
                capability.id,
                given,
                idempotency_key=key,
                connection_id=connection,
                wait_seconds=self._wait_seconds,
                poll=False,
            )
        except MoatError as error:
            return error_of(error)
        return result_of(result)

    async def _run_plan(
        self, client: AsyncMoatClient, arguments: dict[str, Any]
    ) -> types.CallToolResult:
        """The plan the arguments describe, run once per key (a key derived from the plan
        when none is given); the gateway checks the steps."""
        plan = {k: v for k, v in arguments.items() if k in ("steps", "on_failure")}
        if not isinstance(plan.get("steps"), list):
            raise MCPError(code=types.INVALID_PARAMS, message="steps must be a list of steps")
        key = arguments.get(KEY_ARGUMENT)
        if not isinstance(key, str) or not key:
            key = derived_plan_key(plan)
        result = await client.run_plan(
            plan,
            idempotency_key=key,
            wait_seconds=self._wait_seconds,
            dry_run=arguments.get("dry_run") is True,
            poll=False,
        )
        return plan_result_of(result)

    async def verify_token(self, token: str) -> AccessToken | None:
        """A bearer token is good when the gateway takes it as an API key."""
        digest = hashlib.sha256(token.encode()).hexdigest()
        if self._verified.get(digest, 0.0) > time.monotonic():
            return AccessToken(token=token, client_id="moat-api-key", scopes=[])
        try:
            await self.client(token).list_receipts(limit=1)
        except Unauthenticated:
            return None
        except MoatError:
            return None
        self._verified[digest] = time.monotonic() + TOKEN_CACHE_SECONDS
        return AccessToken(token=token, client_id="moat-api-key", scopes=[])


def _bearer(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The API key an HTTP request was authenticated with (None over stdio)."""
    request = ctx.request
    user = getattr(request, "scope", {}).get("user") if request is not None else None
    token = getattr(getattr(user, "access_token", None), "token", None)
    return token if isinstance(token, str) else None


def build_server(tools: MoatTools) -> Server[Any]:
    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        try:
            return await tools.list_tools(_bearer(ctx))
        except MoatError as error:
            raise MCPError(code=types.INTERNAL_ERROR, message=str(error)) from None

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        return await tools.call_tool(_bearer(ctx), params.name, params.arguments or {})

    return Server(
        "moat",
        instructions=(
            "Each tool runs a Moat capability once per idempotency key and answers its "
            "envelope (status, receipt_id, output). An 'accepted' answer is still running: "
            f"ask with {STATUS_TOOL} instead of calling the tool again. {PLAN_TOOL} runs "
            "several capabilities as one plan, each step once."
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def serve_stdio(tools: MoatTools) -> None:
    server = build_server(tools)
    try:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        await tools.aclose()


async def serve_http(tools: MoatTools, host: str, port: int) -> None:
    """Streamable HTTP at ``/mcp``; every request needs ``Authorization: Bearer <API key>``."""
    import uvicorn

    server = build_server(tools)
    app = server.streamable_http_app(
        host=host,
        token_verifier=tools,
        # The gateway issues the keys; no OAuth metadata is published.
        auth=AuthSettings(issuer_url=tools.url, resource_server_url=None),
    )
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    try:
        await uvicorn.Server(config).serve()
    finally:
        await tools.aclose()
