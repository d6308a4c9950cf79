"""Moat's capabilities as LangChain tools, for LangChain and LangGraph agents
(``pip install "moat-client[langchain]"``).

    from langgraph.prebuilt import ToolNode
    from moat_client import MoatClient
    from moat_client.frameworks.langchain import moat_tools

    tools = moat_tools(MoatClient(), ["slack.post_message"])
    model = model.bind_tools(tools)         # any chat model with tool calling
    tool_node = ToolNode(tools)             # or AgentExecutor, or tool.invoke(tool_call)

Each tool is a ``BaseTool`` whose ``args_schema`` is the capability's input schema. Its
idempotency key is made of the ``ToolCall``'s id, scoped by LangGraph's ``thread_id`` when
the run has one: a graph resumed from its checkpoint, or a node retried, runs the same
calls again and gets their recorded outcomes back, never a second effect. A tool invoked
with bare arguments (no ``ToolCall``) is keyed by its LangChain run id, new per invocation
unless ``config={"run_id": ...}`` names it.

The output is the tool message's content (JSON text), and the ``ExecutionResult`` its
artifact (receipt, ``replayed``). A refusal, a provider's failure or a call waiting for a
person's approval is a tool message with ``status="error"`` whose content the model reads.
``GatewayUnavailable`` is raised: the graph's retry of the same call is safe.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

try:
    from langchain_core.callbacks import CallbackManagerForToolRun
    from langchain_core.tools import BaseTool, ToolException
except ImportError as missing:  # pragma: no cover - the extra is not installed
    raise ImportError(f'{missing}: pip install "moat-client[langchain]"') from missing

from moat_client._async import AsyncMoatClient
from moat_client._sync import MoatClient
from moat_client.frameworks._core import (
    AnyClient,
    Capabilities,
    Outcome,
    acatalog,
    aexecute,
    call_key,
    catalog,
    execute,
    tool_name,
)
from moat_client.models import CapabilityInfo

__all__ = ["MoatTool", "amoat_tools", "moat_tool", "moat_tools"]

FRAMEWORK = "langchain"

# The tool call being run: its id and the run's thread (set by ``run``/``arun``, which the
# framework hands them to, and read by ``_run``/``_arun``, which it does not).
_CALL: ContextVar[tuple[str | None, str | None]] = ContextVar("moat_tool_call")


class MoatTool(BaseTool):  # type: ignore[misc]
    """One Moat capability as a LangChain tool."""

    capability: CapabilityInfo
    client: Any
    scope: str | None = None
    response_format: str = "content_and_artifact"
    handle_tool_error: bool = True

    def run(self, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
        token = _CALL.set((kwargs.get("tool_call_id"), _thread(kwargs.get("config"))))
        try:
            return super().run(tool_input, *args, **kwargs)
        finally:
            _CALL.reset(token)

    async def arun(self, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
        token = _CALL.set((kwargs.get("tool_call_id"), _thread(kwargs.get("config"))))
        try:
            return await super().arun(tool_input, *args, **kwargs)
        finally:
            _CALL.reset(token)

    def _key(self, run_manager: Any) -> str:
        call_id, thread = _CALL.get((None, None))
        if call_id is None:
            call_id = f"run-{run_manager.run_id}" if run_manager is not None else None
        if call_id is None:
            raise ToolException(f"{self.capability.id}: no tool call id nor run id to key it")
        scope = ":".join(s for s in (self.scope, thread) if s) or None
        return call_key(FRAMEWORK, self.capability.id, call_id, scope)

    def _run(
        self, run_manager: CallbackManagerForToolRun | None = None, **input: Any
    ) -> tuple[str, Any]:
        if isinstance(self.client, AsyncMoatClient):
            raise TypeError(f"{self.name}: with an AsyncMoatClient, run it with ainvoke")
        return _told(execute(self.client, self.capability.id, input, self._key(run_manager)))

    async def _arun(self, run_manager: Any = None, **input: Any) -> tuple[str, Any]:
        key = self._key(run_manager)
        return _told(await aexecute(self.client, self.capability.id, input, key))


def _thread(config: Mapping[str, Any] | None) -> str | None:
    configurable = (config or {}).get("configurable") or {}
    thread = configurable.get("thread_id")
    return str(thread) if thread is not None else None


def _told(outcome: Outcome) -> tuple[str, Any]:
    """The tool's content and artifact, or the refusal the model reads as a tool error."""
    if not outcome.ok:
        raise ToolException(outcome.message)
    return outcome.text, outcome.result


def moat_tool(
    client: AnyClient,
    capability: str | CapabilityInfo,
    *,
    name: str | None = None,
    scope: str | None = None,
) -> MoatTool:
    """One capability as a LangChain tool.

    Args:
        client: The ``MoatClient`` (``invoke`` and ``ainvoke``, the latter in a thread) or
            ``AsyncMoatClient`` (``ainvoke`` only) that executes.
        capability: The capability's id (read from the catalog) or its ``CapabilityInfo``.
        name: The tool's name; None: the id with ``.`` as ``_``.
        scope: Part of every key, naming the conversation the call ids belong to (needed
            only when the model's call ids repeat across conversations and threads).
    """
    (info,) = catalog(client, [capability])
    return _tool(client, info, name, scope)


def moat_tools(
    client: AnyClient, only: Capabilities | None = None, *, scope: str | None = None
) -> list[MoatTool]:
    """The tenant's catalog (or ``only`` the capabilities named) as LangChain tools."""
    return [_tool(client, info, None, scope) for info in catalog(client, only)]


async def amoat_tools(
    client: AnyClient, only: Capabilities | None = None, *, scope: str | None = None
) -> list[MoatTool]:
    """``moat_tools``, reading the catalog without blocking the event loop."""
    return [_tool(client, info, None, scope) for info in await acatalog(client, only)]


def _tool(client: AnyClient, info: CapabilityInfo, name: str | None, scope: str | None) -> MoatTool:
    if not isinstance(client, MoatClient | AsyncMoatClient):
        raise TypeError(f"a MoatClient or AsyncMoatClient, not {type(client).__name__}")
    return MoatTool(
        name=name or tool_name(info.id),
        description=info.description,
        args_schema=info.input_schema,
        capability=info,
        client=client,
        scope=scope,
    )
