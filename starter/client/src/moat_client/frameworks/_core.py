"""What every framework adapter shares: the catalog read, the tool's name, the idempotency
key made of the framework's call id, and the outcome told as the model reads it.

The key is ``<framework>:[<scope>:]<capability>:<call id>``: the same call id always gives
the same key, so a framework that runs a call again (a retry, a resumed run) gets the
recorded outcome back. ``scope`` names the conversation or run the ids belong to, for
models whose call ids repeat across conversations. A key longer than the gateway takes is
replaced by its SHA-256, still one per call.

A run the gateway refused, a provider's failure and a call held for a person's approval are
outcomes the model reads (``Outcome.message``), not errors that end the agent's run. Only
``GatewayUnavailable`` is raised: no answer came, and the framework's retry of the same call
is safe (same key).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from moat_client._async import AsyncMoatClient
from moat_client._results import ExecutionResult
from moat_client._sync import MoatClient
from moat_client.errors import (
    ApprovalRequired,
    ExecutionPending,
    GatewayUnavailable,
    MoatError,
    PolicyDenied,
)
from moat_client.models import CapabilityInfo

AnyClient = MoatClient | AsyncMoatClient
# What a caller names capabilities by: their ids, or the catalog's entries.
Capabilities = Sequence[str | CapabilityInfo]

MAX_KEY = 256
_NOT_A_NAME = re.compile(r"[^A-Za-z0-9_-]")


def tool_name(capability_id: str) -> str:
    """The tool's name for a capability: ``slack.post_message`` -> ``slack_post_message``
    (the characters every model provider accepts in a tool's name, at most 64)."""
    return _NOT_A_NAME.sub("_", capability_id)[:64]


def call_key(framework: str, capability_id: str, call_id: str, scope: str | None = None) -> str:
    """The idempotency key of one tool call: the same call id gives the same key."""
    key = ":".join(part for part in (framework, scope, capability_id, call_id) if part)
    if len(key) > MAX_KEY:
        key = f"{framework}:sha256:{hashlib.sha256(key.encode()).hexdigest()}"
    return key


def _chosen(catalog: list[CapabilityInfo], only: Capabilities | None) -> list[CapabilityInfo]:
    if only is None:
        return catalog
    by_id = {c.id: c for c in catalog}
    chosen: list[CapabilityInfo] = []
    for wanted in only:
        if isinstance(wanted, CapabilityInfo):
            chosen.append(wanted)
        elif wanted in by_id:
            chosen.append(by_id[wanted])
        else:
            raise ValueError(f"no capability {wanted!r} in the tenant's catalog")
    return chosen


def catalog(client: AnyClient, only: Capabilities | None = None) -> list[CapabilityInfo]:
    """The capabilities to make tools of: ``only`` those named, else the whole catalog.

    Entries given as ``CapabilityInfo`` need no read. Otherwise the catalog is read once,
    blocking (an ``AsyncMoatClient``'s through a short-lived blocking client with its URL
    and key; in a running loop prefer ``acatalog``).

    Raises:
        ValueError: A named capability is not in the tenant's catalog.
        MoatError: The gateway refused the read (``GatewayUnavailable`` when it did not answer).
    """
    if only is not None and all(isinstance(c, CapabilityInfo) for c in only):
        return _chosen([], only)
    if isinstance(client, MoatClient):
        return _chosen(client.capabilities(), only)
    api_key = client._auth["Authorization"].removeprefix("Bearer ")
    with MoatClient(client.url, api_key, timeout=client.timeout, retry=client.retry) as reader:
        return _chosen(reader.capabilities(), only)


async def acatalog(client: AnyClient, only: Capabilities | None = None) -> list[CapabilityInfo]:
    """``catalog`` without blocking the event loop."""
    if only is not None and all(isinstance(c, CapabilityInfo) for c in only):
        return _chosen([], only)
    if isinstance(client, AsyncMoatClient):
        return _chosen(await client.capabilities(), only)
    return await asyncio.to_thread(catalog, client, only)


@dataclass(frozen=True)
class Outcome:
    """One tool call's end: the capability's ``output`` when it ran (``ok``), else the
    ``message`` the model reads (refused, failed, or waiting for a person's approval)."""

    ok: bool
    output: Any
    message: str
    result: ExecutionResult | None = None
    error: MoatError | None = None

    @property
    def receipt_id(self) -> str | None:
        """The execution's receipt, when the gateway recorded one."""
        if self.result is not None:
            return self.result.receipt_id
        return self.error.receipt_id if self.error is not None else None

    @property
    def text(self) -> str:
        """The output as JSON text when it ran, else the message."""
        return json.dumps(self.output) if self.ok else self.message


def _told(outcome: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in outcome.items() if v is not None})


def _from_result(capability_id: str, result: ExecutionResult) -> Outcome:
    if result.ok:
        return Outcome(True, result.output, "", result=result)
    if result.error is not None:
        said = {
            "status": "failed",
            "capability": capability_id,
            "code": result.error.code,
            "message": result.error.message,
            "receipt_id": result.receipt_id,
        }
    else:
        said = {
            "status": str(result.status),
            "capability": capability_id,
            "receipt_id": result.receipt_id,
        }
    return Outcome(False, None, _told(said), result=result)


def _from_error(capability_id: str, error: MoatError) -> Outcome:
    said: dict[str, Any]
    if isinstance(error, ApprovalRequired):
        approval = error.approval
        said = {
            "status": "awaiting_approval",
            "message": "a person must approve this call before it runs; nothing has run yet",
            "approval_id": approval.id if approval is not None else None,
        }
    elif isinstance(error, ExecutionPending):
        said = {"status": "pending", "message": "the call is still running"}
    else:
        said = {"status": "refused", "message": error.message}
        if isinstance(error, PolicyDenied):
            said["message"] += " (Moat's policy refused it; nothing ran)"
    said |= {"capability": capability_id, "code": error.code}
    said["receipt_id"] = error.receipt_id or error.details.get("receipt_id")
    return Outcome(False, None, _told(said), error=error)


def execute(client: MoatClient, capability_id: str, input: dict[str, Any], key: str) -> Outcome:
    """Run one tool call through a blocking client.

    Raises:
        GatewayUnavailable: No answer before the client's deadline: the framework's retry
            of the call (same key) is safe.
    """
    try:
        result = client.execute(capability_id, input, idempotency_key=key)
    except GatewayUnavailable:
        raise
    except MoatError as exc:
        return _from_error(capability_id, exc)
    return _from_result(capability_id, result)


async def aexecute(
    client: AnyClient, capability_id: str, input: dict[str, Any], key: str
) -> Outcome:
    """``execute`` without blocking the event loop (a blocking client runs in a thread)."""
    if isinstance(client, MoatClient):
        return await asyncio.to_thread(execute, client, capability_id, input, key)
    try:
        result = await client.execute(capability_id, input, idempotency_key=key)
    except GatewayUnavailable:
        raise
    except MoatError as exc:
        return _from_error(capability_id, exc)
    return _from_result(capability_id, result)
