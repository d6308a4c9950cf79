"""Moat's capabilities as Pydantic AI tools (``pip install "moat-client[pydantic-ai]"``).

    from pydantic_ai import Agent
    from moat_client import AsyncMoatClient
    from moat_client.frameworks.pydantic_ai import moat_tools

    moat = AsyncMoatClient()
    agent = Agent("openai:gpt-4.1-mini", tools=moat_tools(moat, ["slack.post_message"]))
    print((await agent.run("Tell #ops the deploy is done")).output)

Each tool is a ``Tool`` whose JSON schema is the capability's input schema. Its idempotency
key is made of the run's id and the tool call's id (``RunContext.run_id``,
``RunContext.tool_call_id``): a durable run re-executed by its engine (Temporal, DBOS,
Prefect keep the run id), or a run started again with the same ``run_id``, gets the recorded
outcome of each call back, never a second effect. The output is the tool's return; a
refusal, a provider's failure or a call waiting for a person's approval is a failed tool
return (``ToolFailed``) the model reads and adapts to, without using up its retries.
"""

from __future__ import annotations

from typing import Any

try:
    from pydantic_ai import RunContext, Tool
    from pydantic_ai.exceptions import ToolFailed
except ImportError as missing:  # pragma: no cover - the extra is not installed
    raise ImportError(f'{missing}: pip install "moat-client[pydantic-ai]"') from missing

from moat_client.frameworks._core import (
    AnyClient,
    Capabilities,
    acatalog,
    aexecute,
    call_key,
    catalog,
    tool_name,
)
from moat_client.models import CapabilityInfo

__all__ = ["amoat_tools", "moat_tool", "moat_tools"]

FRAMEWORK = "pydantic-ai"


def moat_tool(
    client: AnyClient,
    capability: str | CapabilityInfo,
    *,
    name: str | None = None,
    scope: str | None = None,
) -> Tool[Any]:
    """One capability as a Pydantic AI ``Tool``.

    Args:
        client: The ``AsyncMoatClient`` (or ``MoatClient``, run in a thread) that executes.
        capability: The capability's id (read from the catalog) or its ``CapabilityInfo``.
        name: The tool's name; None: the id with ``.`` as ``_``.
        scope: Part of every key, beside the run id (e.g. the agent's name).
    """
    (info,) = catalog(client, [capability])
    return _tool(client, info, name, scope)


def moat_tools(
    client: AnyClient, only: Capabilities | None = None, *, scope: str | None = None
) -> list[Tool[Any]]:
    """The tenant's catalog (or ``only`` the capabilities named) as Pydantic AI tools."""
    return [_tool(client, info, None, scope) for info in catalog(client, only)]


async def amoat_tools(
    client: AnyClient, only: Capabilities | None = None, *, scope: str | None = None
) -> list[Tool[Any]]:
    """``moat_tools``, reading the catalog without blocking the event loop."""
    return [_tool(client, info, None, scope) for info in await acatalog(client, only)]


def _tool(
    client: AnyClient, info: CapabilityInfo, name: str | None, scope: str | None
) -> Tool[Any]:
    async def call(ctx: RunContext[Any], **input: Any) -> Any:
        if not ctx.tool_call_id:
            raise ToolFailed(f"{info.id}: a Moat tool runs only as a model's tool call")
        run_scope = ":".join(s for s in (scope, ctx.run_id) if s) or None
        key = call_key(FRAMEWORK, info.id, ctx.tool_call_id, run_scope)
        outcome = await aexecute(client, info.id, input, key)
        if not outcome.ok:
            raise ToolFailed(outcome.message)
        return outcome.output

    return Tool.from_schema(
        call,
        name=name or tool_name(info.id),
        description=info.description,
        json_schema=info.input_schema,
        takes_ctx=True,
    )
