"""An OpenAI Agents SDK agent whose tools are the tenant's Moat capabilities.

    pip install "./starter/client[openai-agents]"     # from the checkout
    export MOAT_URL=http://127.0.0.1:8000 MOAT_API_KEY=moat_… OPENAI_API_KEY=sk-…
    python examples/openai-agents/agent.py "Echo 'hello' through Moat"

Every tool call runs once per call id: the SDK resuming or retrying a call gets Moat's
recorded outcome back (a replay), never a second effect.
"""

from __future__ import annotations

import asyncio
import sys

from agents import Agent, Model, Runner
from moat_client import AsyncMoatClient
from moat_client.frameworks.openai_agents import amoat_tools

INSTRUCTIONS = "Do what is asked with the tools. Say what each tool answered."


async def main(prompt: str, model: str | Model = "gpt-4.1-mini") -> str:
    """Run the agent once on ``prompt``; its final answer."""
    async with AsyncMoatClient() as moat:  # MOAT_URL, MOAT_API_KEY
        tools = await amoat_tools(moat)  # the whole catalog; or amoat_tools(moat, ["demo.echo"])
        agent = Agent(name="moat-agent", instructions=INSTRUCTIONS, model=model, tools=tools)
        result = await Runner.run(agent, prompt)
        return str(result.final_output)


if __name__ == "__main__":
    print(asyncio.run(main(" ".join(sys.argv[1:]) or "Echo 'hello' through Moat")))
