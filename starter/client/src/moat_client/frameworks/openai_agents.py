"""Moat's capabilities as OpenAI Agents SDK tools (``pip install "moat-client[openai-agents]"``).

    from agents import Agent, Runner
    from moat_client import AsyncMoatClient
    from moat_client.frameworks.openai_agents import moat_tools

    moat = AsyncMoatClient()
    agent = Agent(name="ops", tools=moat_tools(moat, ["slack.post_message"]))
    print((await Runner.run(agent, "Tell #ops the deploy is done")).final_output)

Each tool is a ``FunctionTool`` whose parameters are the capability's input schema. Its
idempotency key is made of the tool call's id (``ToolContext.tool_call_id``): a run resumed
or retried with the same call gets the recorded outcome back, never a second effect. The
output is the tool's result (JSON text); a refusal, a provider's failure or a call waiting
for a person's approval is a result the model reads, not an error that ends the run.
"""

from __future__ import annotations

import json
from typing import Any

try:
    from agents import FunctionTool
    from agents.tool_context import ToolContext
except ImportError as missing:  # pragma: no cover - the extra is not installed
    raise ImportError(f'{missing}: pip install "moat-client[openai-agents]"') from missing

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

FRAMEWORK = "openai-agents"


def moat_tool(
    client: AnyClient,
    capability: str | CapabilityInfo,
    *,
    name: str | None = None,
    scope: str | None = None,
) -> FunctionTool:
    """One capability as a ``FunctionTool``.

    Args:
        client: The ``AsyncMoatClient`` (or ``MoatClient``, run in a thread) that executes.
        capability: The capability's id (read from the catalog) or its ``CapabilityInfo``.
        name: The tool's name; None: the id with ``.`` as ``_``.
        scope: Part of every key, naming the conversation the call ids belong to (needed
            only when the model's call ids repeat across conversations).
    """
    (info,) = catalog(client, [capability])
    return _tool(client, info, name, scope)


def moat_tools(
    client: AnyClient, only: Capabilities | None = None, *, scope: str | None = None
) -> list[FunctionTool]:
    """The tenant's catalog (or ``only`` the capabilities named) as ``FunctionTool``s."""
    return [_tool(client, info, None, scope) for info in catalog(client, only)]


async def amoat_tools(
    client: AnyClient, only: Capabilities | None = None, *, scope: str | None = None
) -> list[FunctionTool]:
    """``moat_tools``, reading the catalog without blocking the event loop."""
    return [_tool(client, info, None, scope) for info in await acatalog(client, only)]


def _tool(
    client: AnyClient, info: CapabilityInfo, name: str | None, scope: str | None
) -> FunctionTool:
    # Annotated ``ToolContext``: the SDK hands the call's context (its id) only to such tools.
    async def invoke(context: ToolContext[Any], arguments: str) -> str:
        call_id = getattr(context, "tool_call_id", None)
        if not call_id:
            raise ValueError(f"{info.id}: a Moat tool runs only as a model's tool call")
        key = call_key(FRAMEWORK, info.id, call_id, scope)
        outcome = await aexecute(client, info.id, json.loads(arguments or "{}"), key)
        return outcome.text

    return FunctionTool(
        name=name or tool_name(info.id),
        description=info.description,
        params_json_schema=info.input_schema,
        on_invoke_tool=invoke,
        strict_json_schema=False,
    )
