"""Moat's capabilities as the tools of agent frameworks, one module per framework.

    pip install "moat-client[openai-agents]"   # moat_client.frameworks.openai_agents
    pip install "moat-client[langchain]"       # moat_client.frameworks.langchain
    pip install "moat-client[pydantic-ai]"     # moat_client.frameworks.pydantic_ai

Each module turns the tenant's catalog, or one named capability, into the framework's own
tool, whose idempotency key comes from the framework's tool-call id: the framework's retry
of a call (same id) is a Moat replay, never a second effect. Only the module of a framework
imports it; ``moat_client`` itself needs httpx and pydantic only.
"""
