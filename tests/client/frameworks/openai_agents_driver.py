"""Runs in the OpenAI Agents SDK's own environment (``make frameworks``): the example agent
(examples/openai-agents/agent.py) driven by the SDK's scripted model, one agent run per
call of argv[1] (a JSON list of ``{"tool", "args", "call_id"}``). The scripted model asks
for the call, then answers with the tool's result; each run's answer is printed as one
JSON list. The gateway comes from MOAT_URL and MOAT_API_KEY."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path

from agents import set_tracing_disabled
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from moat_client import MoatClient
from moat_client.frameworks.openai_agents import moat_tool

EXAMPLE = Path(__file__).parents[3] / "examples" / "openai-agents" / "agent.py"


def tool_output(call: ModelCall) -> ModelStep:
    """The model's second turn: it says the tool's result, as it received it."""
    outputs = [i for i in call.input if i.get("type") == "function_call_output"]
    return ModelStep(output=[assistant_message(str(outputs[-1]["output"]))])


async def main() -> None:
    set_tracing_disabled(True)  # no trace export: nothing leaves the machine
    spec = importlib.util.spec_from_file_location("example_agent", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    with MoatClient() as moat:  # one named capability, as the SDK sees it
        tool = moat_tool(moat, "demo.echo")
        echo = next(c for c in moat.capabilities() if c.id == "demo.echo")
    assert tool.name == "demo_echo" and tool.params_json_schema == echo.input_schema
    answers = []
    for call in json.loads(sys.argv[1]):
        model = ScriptedModel(
            [
                [function_call(call["tool"], call["args"], call_id=call["call_id"])],
                ModelStep.respond(tool_output),
            ]
        )
        answers.append(await example.main("do it", model=model))
    print(json.dumps(answers))


if __name__ == "__main__":
    asyncio.run(main())
