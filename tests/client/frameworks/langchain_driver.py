"""Runs in LangChain's own environment (``make frameworks``): the example LangGraph agent
(examples/langchain/agent.py) driven by a scripted chat model, one graph run per call of
argv[1] (a JSON list of ``{"tool", "args", "call_id"}``), all in thread ``thread-1``. The
model asks for the call, then answers with the tool message's content; each run's answer
is printed as one JSON list. The gateway comes from MOAT_URL and MOAT_API_KEY."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from moat_client import AsyncMoatClient
from moat_client.frameworks.langchain import moat_tool

EXAMPLE = Path(__file__).parents[3] / "examples" / "langchain" / "agent.py"


class ScriptedChatModel(BaseChatModel):
    """Asks for one tool call, then says the tool message it got back."""

    call: dict[str, Any]

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            # A refusal is a tool error, its content the message the model reads.
            refused = str(last.content).startswith('{"status": "')
            assert (last.status == "error") == refused, last
            said = AIMessage(content=str(last.content))
        else:
            tool_call = {"name": self.call["tool"], "args": self.call["args"]}
            said = AIMessage(content="", tool_calls=[{**tool_call, "id": self.call["call_id"]}])
        return ChatResult(generations=[ChatGeneration(message=said)])


def main() -> None:
    spec = importlib.util.spec_from_file_location("example_agent", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    calls = json.loads(sys.argv[1])
    answers = [example.main("do it", ScriptedChatModel(call=c)) for c in calls]
    asyncio.run(retry_alone(calls[0], answers[0]))
    print(json.dumps(answers))


async def retry_alone(call: dict[str, Any], answered: str) -> None:
    """The first call again, through one named capability's tool on an async client: the
    same id in the same thread is a replay (the artifact says so)."""
    async with AsyncMoatClient() as moat:
        tool = moat_tool(moat, "http.request")
        assert tool.name == "http_request" and tool.args_schema["type"] == "object"
        tool_call = {"type": "tool_call", "name": tool.name, "args": call["args"]}
        config = {"configurable": {"thread_id": "thread-1"}}
        message = await tool.ainvoke({**tool_call, "id": call["call_id"]}, config)
    assert message.content == answered and message.artifact.replayed, message


if __name__ == "__main__":
    main()
