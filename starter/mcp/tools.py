"""From the capability catalog to MCP tools, and from Moat's answers to tool results.

A tool per capability: its name is the capability id with dots as underscores (many agent
hosts accept only ``[A-Za-z0-9_-]`` in a tool name), its description and input schema the
catalog's, plus one optional argument, ``idempotency_key``. Without it the key is derived
from the canonical arguments (RFC 8785), so a model repeating the same call gets the stored
receipt instead of a second effect.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import mcp_types as types
import rfc8785
from moat_client import CapabilityInfo, ExecutionResult, MoatError

KEY_ARGUMENT = "idempotency_key"
CONNECTION_ARGUMENT = "connection_id"
STATUS_TOOL = "moat_execution_status"

_KEY_SCHEMA = {
    "type": "string",
    "minLength": 1,
    "maxLength": 256,
    "description": (
        "Optional. The same key never runs twice: pass one to make two calls with identical "
        "arguments run twice (different keys), or to make a retried call with reworded "
        "arguments count as the same action (same key). Without it, identical arguments are "
        "one action."
    ),
}

STATUS_TOOL_SPEC = types.Tool(
    name=STATUS_TOOL,
    description=(
        "How an earlier Moat execution stands (one that answered 'accepted': still running, "
        "or waiting for a person's approval), by the receipt_id it gave."
    ),
    input_schema={
        "type": "object",
        "properties": {"receipt_id": {"type": "string", "description": "From the earlier call."}},
        "required": ["receipt_id"],
        "additionalProperties": False,
    },
)


def tool_name(capability_id: str) -> str:
    return capability_id.replace(".", "_")


def needs_connection(capability: CapabilityInfo) -> bool:
    """Whether the catalog says the capability runs on a tenant's connection (a gateway that
    does not list ``connection_types`` says nothing: no such argument)."""
    return bool(capability.connection_types)


def tool_of(capability: CapabilityInfo) -> types.Tool:
    schema = copy.deepcopy(capability.input_schema)
    schema.setdefault("type", "object")
    properties = schema.setdefault("properties", {})
    properties[KEY_ARGUMENT] = _KEY_SCHEMA
    if needs_connection(capability):
        properties[CONNECTION_ARGUMENT] = {
            "type": "string",
            "description": "Optional. The tenant's connection (credentials) to run it with.",
        }
    effect = capability.effect_type.lower()
    approval = " A person must approve each call first." if capability.requires_approval else ""
    return types.Tool(
        name=tool_name(capability.id),
        title=capability.id,
        description=(
            f"{capability.description} (Moat capability {capability.id} {capability.version}, "
            f"effect {effect}; runs once per idempotency key, with a receipt.){approval}"
        ),
        input_schema=schema,
    )


def derived_key(
    capability_id: str, arguments: dict[str, Any], connection_id: str | None = None
) -> str:
    """The key of a call without one: the same capability, connection and canonical
    arguments, the same key."""
    call: dict[str, Any] = {"capability_id": capability_id, "input": arguments}
    if connection_id:
        call["connection_id"] = connection_id
    canonical = rfc8785.dumps(call)
    return "mcp:sha256:" + hashlib.sha256(canonical).hexdigest()


def _text(value: Any) -> list[types.ContentBlock]:
    return [types.TextContent(type="text", text=json.dumps(value, ensure_ascii=False, indent=1))]


def result_of(result: ExecutionResult) -> types.CallToolResult:
    """The envelope as structured content; a provider's failure is a tool error, and a
    run still going says which id to ask about."""
    envelope = json.loads(result.envelope.model_dump_json())
    if result.status == "accepted":
        ask = f"{STATUS_TOOL}(receipt_id={result.receipt_id!r})"
        approval = result.approval
        if approval is not None and approval.status == "pending":
            note = (
                f"Accepted, waiting for a person's approval ({approval.id}, {approval.status}, "
                f"until {approval.expires_at.isoformat()}): nothing has run yet. Do not call "
                f"the tool again; tell the user approval {approval.id} is needed, and ask how "
                f"it stands with {ask}."
            )
        else:
            # Approved runs are running: the approval stays in the envelope as evidence.
            decided = f" ({approval.id} {approval.status})" if approval is not None else ""
            note = (
                f"Accepted{decided}: the execution is still running. Nothing more to send: "
                f"ask with {ask}."
            )
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=note), *_text(envelope)],
            structured_content=envelope,
        )
    return types.CallToolResult(
        content=_text(envelope), structured_content=envelope, is_error=result.status == "failed"
    )


def error_of(error: MoatError) -> types.CallToolResult:
    """A Moat refusal as a tool error, led by its stable code and naming failing fields."""
    body = {
        "status": "failed",
        "error": {"code": error.code, "message": error.message, "details": error.details},
        "http_status": error.http_status,
        "trace_id": error.trace_id,
    }
    if error.receipt_id is not None:
        body["receipt_id"] = error.receipt_id
    headline = f"{error.code}: {error.message}"
    fields = [
        ".".join(str(part) for part in problem.get("loc", ()) if part not in ("body", "input"))
        + f": {problem.get('msg', '')}"
        for problem in error.details.get("errors", ())
        if isinstance(problem, dict)
    ]
    if fields:
        headline += " (" + "; ".join(fields) + ")"
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=headline), *_text(body)],
        structured_content=body,
        is_error=True,
    )
