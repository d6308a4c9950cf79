"""A LangGraph agent whose tools are the tenant's Moat capabilities.

    pip install "./starter/client[langchain]" langgraph langchain-openai   # from the checkout
    export MOAT_URL=http://127.0.0.1:8000 MOAT_API_KEY=moat_… OPENAI_API_KEY=sk-…
    python examples/langchain/agent.py "Echo 'hello' through Moat"

Every tool call runs once per call id within the thread: the graph resumed from its
checkpoint, or its tool node retried, gets Moat's recorded outcome back (a replay), never
a second effect.
"""

from __future__ import annotations

import sys
from typing import Any

from langchain_core.language_models import BaseChatModel
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from moat_client import MoatClient
from moat_client.frameworks.langchain import moat_tools


def build(model: BaseChatModel, tools: list[Any]) -> Any:
    """The agent: the model, and a tool node for the calls it asks for, until it answers."""
    bound = model.bind_tools(tools)

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [bound.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=InMemorySaver())


def main(prompt: str, model: BaseChatModel | None = None, thread: str = "thread-1") -> str:
    """Run the agent once on ``prompt`` in ``thread``; its final answer."""
    if model is None:
        from langchain_openai import ChatOpenAI

        model = ChatOpenAI(model="gpt-4.1-mini")
    with MoatClient() as moat:  # MOAT_URL, MOAT_API_KEY
        app = build(model, moat_tools(moat))  # the whole catalog; or moat_tools(moat, [...])
        config = {"configurable": {"thread_id": thread}}
        state = app.invoke({"messages": [("user", prompt)]}, config)
        return str(state["messages"][-1].content)


if __name__ == "__main__":
    print(main(" ".join(sys.argv[1:]) or "Echo 'hello' through Moat"))
