"""A Pydantic AI agent whose tools are the tenant's Moat capabilities.

    pip install "./starter/client[pydantic-ai]" "pydantic-ai-slim[openai]"   # from the checkout
    export MOAT_URL=http://127.0.0.1:8000 MOAT_API_KEY=moat_… OPENAI_API_KEY=sk-…
    python examples/pydantic-ai/agent.py "Echo 'hello' through Moat"

Every tool call runs once per run id and call id: a run started again with the same
``run_id`` (or re-executed by a durable engine) gets Moat's recorded outcome back (a
replay), never a second effect.
"""

from __future__ import annotations

import asyncio
import sys

from moat_client import AsyncMoatClient
from moat_client.frameworks.pydantic_ai import amoat_tools
from pydantic_ai import Agent
from pydantic_ai.models import Model

INSTRUCTIONS = "Do what is asked with the tools. Say what each tool answered."


async def main(
    prompt: str, model: str | Model = "openai:gpt-4.1-mini", run_id: str | None = None
) -> str:
    """Run the agent once on ``prompt``; its final answer."""
    async with AsyncMoatClient() as moat:  # MOAT_URL, MOAT_API_KEY
        tools = await amoat_tools(moat)  # the whole catalog; or amoat_tools(moat, ["demo.echo"])
        agent = Agent(model, instructions=INSTRUCTIONS, tools=tools)
        result = await agent.run(prompt, run_id=run_id)
        return str(result.output)


if __name__ == "__main__":
    print(asyncio.run(main(" ".join(sys.argv[1:]) or "Echo 'hello' through Moat")))
