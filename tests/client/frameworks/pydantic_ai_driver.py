"""Runs in Pydantic AI's own environment (``make frameworks``): the example agent
(examples/pydantic-ai/agent.py) driven by a ``FunctionModel``, one agent run per call of
argv[1] (a JSON list of ``{"tool", "args", "call_id"}``), each with run id ``run-1`` (as a
durable engine re-executing the run gives). The model asks for the call, then answers with
the tool's return; each run's answer is printed as one JSON list. The gateway comes from
MOAT_URL and MOAT_API_KEY."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from moat_client import AsyncMoatClient
from moat_client.frameworks.pydantic_ai import moat_tool
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

EXAMPLE = Path(__file__).parents[3] / "examples" / "pydantic-ai" / "agent.py"


def scripted(call: dict[str, Any]) -> FunctionModel:
    """Asks for ``call``, then says the tool's return (a failed one as its message)."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        returned = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        if isinstance(last, ModelRequest) and returned:
            part = returned[-1]
            content = part.content
            if isinstance(content, str):
                # A refusal is a failed return, its content the message the model reads.
                assert (part.outcome == "failed") == content.startswith('{"status": "'), part
            else:
                content = json.dumps(content)
            return ModelResponse(parts=[TextPart(content)])
        ask = ToolCallPart(call["tool"], call["args"], tool_call_id=call["call_id"])
        return ModelResponse(parts=[ask])

    return FunctionModel(respond)


async def main() -> None:
    spec = importlib.util.spec_from_file_location("example_agent", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    async with AsyncMoatClient() as moat:  # one named capability, as Pydantic AI sees it
        tool = moat_tool(moat, "demo.echo")
        echo = next(c for c in await moat.capabilities() if c.id == "demo.echo")
    assert tool.name == "demo_echo" and tool.tool_def.parameters_json_schema == echo.input_schema
    answers = [
        await example.main("do it", scripted(c), run_id="run-1") for c in json.loads(sys.argv[1])
    ]
    print(json.dumps(answers))


if __name__ == "__main__":
    asyncio.run(main())
