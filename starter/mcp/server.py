"""The MCP server: lists the catalog's capabilities as tools and executes a tool call
through the gateway with the agents' client, so every call is an ordinary Moat execution
(idempotent, policy-checked, with a receipt); ``moat_run_plan`` runs several as one plan.
An approver's tools list, show and decide approvals (``starter.mcp.approvals``); a call
waiting for the requester's own approval is put to the person through elicitation where
the rule allows it and the server holds the in-session door (``starter.mcp.in_session``).

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
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from moat_client import (
    AsyncMoatClient,
    CapabilityInfo,
    ExecutionResult,
    MoatError,
    RetryPolicy,
    Unauthenticated,
)
from moat_client.errors import error_for
from moat_client.models import ErrorBody

from schemas.ids import is_receipt_id
from starter.mcp.approvals import (
    APPROVAL_SPECS,
    APPROVAL_TOOLS,
    ApproverTools,
    approval_result,
)
from starter.mcp.in_session import INPUT_KEY, Asking, InSessionApprovals
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
from starter.mcp.tracing import ServerAttributes, carry_trace, note_call
from starter.service import MoatError as ServiceError

BAD_RECEIPT_ID = (
    "receipt_id must be the receipt_id a tool call answered: a UUID in lower case, such as "
    "0190a2b4-5c6d-7e8f-9a0b-1c2d3e4f5a6b"
)
# A verified bearer token is trusted this long before the gateway is asked again; the
# gateway checks the key on every call anyway.
TOKEN_CACHE_SECONDS = 30.0
# How long a call approved in its session waits for the run to end before answering
# ``accepted`` (the status tool then follows it).
IN_SESSION_WAIT_SECONDS = 60.0
# The HTTP status of the refusals the in-session door meets, as the gateway answers them.
_STATUS_OF = {"approval_not_pending": 409, "approval_mismatch": 409, "approval_stale": 409}


def as_client_error(refused: ServiceError) -> MoatError:
    """A refusal of the in-session door, in the shape the gateway's refusals have."""
    body = ErrorBody(code=refused.code, message=refused.message, details=refused.details)
    return error_for(_STATUS_OF.get(refused.code, 403), body, "")


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
        in_session: InSessionApprovals | None = None,
    ) -> None:
        self.url = url
        self._api_key = api_key
        self._wait_seconds = wait_seconds
        self._retry = retry or RetryPolicy(deadline=60.0)
        # Each gateway call is a child of the MCP message's span, in the caller's trace.
        self._http = http or httpx.AsyncClient(timeout=30.0, event_hooks={"request": [carry_trace]})
        self._catalog: dict[str, CapabilityInfo] = {}
        self._verified: dict[str, float] = {}
        self._approvers = ApproverTools(url, self._http)
        self._in_session = in_session

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
            tools=[
                *(tool_of(c) for c in catalog.values()),
                STATUS_TOOL_SPEC,
                PLAN_TOOL_SPEC,
                *APPROVAL_SPECS,
            ]
        )

    async def call_tool(
        self,
        api_key: str | None,
        name: str,
        arguments: dict[str, Any],
        asking: Asking | None = None,
    ) -> types.CallToolResult | types.InputRequiredResult:
        """``asking``: how this call may ask the session's person (None when the client
        declared no elicitation)."""
        client = self.client(api_key)
        try:
            if name in APPROVAL_TOOLS:
                answer = await self._approvers.call(api_key or self._api_key or "", name, arguments)
                return approval_result(answer)
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
            note_call(capability.id, result.receipt_id)
            if asking is not None and self._in_session is not None:
                asked = await self._asked_in_session(client, api_key, result, asking)
                if isinstance(asked, types.InputRequiredResult):
                    return asked
                result = asked
        except MoatError as error:
            return error_of(error)
        except ServiceError as refused:
            return error_of(as_client_error(refused))
        return result_of(result)

    async def _asked_in_session(
        self,
        client: AsyncMoatClient,
        api_key: str | None,
        result: ExecutionResult,
        asking: Asking,
    ) -> ExecutionResult | types.InputRequiredResult:
        """The execution's outcome once the person decided in this session; the result as
        it was when the rule does not allow it or the person left it pending; or the form
        to answer, for a client that answers it by calling again (2026-07-28)."""
        approval = result.approval
        if result.status != "accepted" or approval is None or approval.status != "pending":
            return result
        assert self._in_session is not None
        asked = await self._in_session.pending(api_key or self._api_key or "", approval.id)
        if asked is None or result.receipt_id is None:
            return result
        if asking.elicit is not None:
            answer = await asking.elicit(asked.form())
        else:
            given = asking.answer(asked)
            if given is None:
                form = types.ElicitRequest(params=asked.form())
                return types.InputRequiredResult(
                    input_requests={INPUT_KEY: form}, request_state=asked.state()
                )
            answer = given
        if await self._in_session.decide(asked, answer) == "pending":
            return result
        return await client.wait(result.receipt_id, max_seconds=IN_SESSION_WAIT_SECONDS)

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


_ELICITATION = types.ClientCapabilities(elicitation=types.ElicitationCapability())


def _asking(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> Asking | None:
    """How this call may ask the session's person with a form, if its client declared
    elicitation."""
    if not ctx.session.check_client_capability(_ELICITATION):
        return None
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return Asking(responses=params.input_responses, state=params.request_state)
    if not ctx.session.can_send_request:
        return None

    async def elicit(form: types.ElicitRequestFormParams) -> types.ElicitResult:
        return await ctx.session.elicit_form(
            form.message, form.requested_schema, related_request_id=ctx.request_id
        )

    return Asking(elicit=elicit)


def build_server(tools: MoatTools, transport: str | None = None) -> Server[Any]:
    """The MCP server of ``tools``; ``transport`` (``pipe`` for stdio, ``tcp`` for HTTP)
    is recorded on its spans (``starter.mcp.tracing``)."""

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        try:
            return await tools.list_tools(_bearer(ctx))
        except MoatError as error:
            raise MCPError(code=types.INTERNAL_ERROR, message=str(error)) from None

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        arguments = params.arguments or {}
        return await tools.call_tool(_bearer(ctx), params.name, arguments, _asking(ctx, params))

    server: Server[Any] = Server(
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
    server.middleware.append(ServerAttributes(transport))
    return server


async def serve_stdio(tools: MoatTools) -> None:
    server = build_server(tools, "pipe")
    try:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        await tools.aclose()


async def serve_http(tools: MoatTools, host: str, port: int) -> None:
    """Streamable HTTP at ``/mcp``; every request needs ``Authorization: Bearer <API key>``."""
    import uvicorn

    server = build_server(tools, "tcp")
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
