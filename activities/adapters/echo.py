"""``demo.echo``: the offline adapter."""

from __future__ import annotations

from activities.adapters.responses import recorded
from schemas.connections import Credential
from schemas.run import AdapterInput, AdapterOutput


async def echo_adapter(inp: AdapterInput, credential: Credential | None = None) -> AdapterOutput:
    """``demo.echo``: offline, returns its input."""
    return recorded(None, inp.input)
