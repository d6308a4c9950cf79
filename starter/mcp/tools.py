"""From the capability catalog to MCP tools, and from Moat's answers to tool results.

A tool per capability: its name is the capability id with dots as underscores (many agent
hosts accept only ``[A-Za-z0-9_-]`` in a tool name), its description and input schema the
catalog's, plus one optional argument, ``idempotency_key``. Without it the key is derived
from the canonical arguments (RFC 8785), so a model repeating the same call gets the stored
receipt instead of a second effect.

One more tool, ``moat_run_plan``, runs several calls as one plan (``POST /v1/plans``), each
step once; without a key, the plan's key is derived from its canonical steps the same way.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import mcp_types as types
import rfc8785
from moat_client import CapabilityInfo, ExecutionResult, MoatError, PlanResult

from schemas.plans import MAX_PLAN_KEY_LENGTH, MAX_STEPS, STEP_ID_PATTERN, OnFailure, StepStatus
from starter.mcp.annotations import capability_annotations, moat_annotations

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
    annotations=moat_annotations(read_only=True),
)


PLAN_TOOL = "moat_run_plan"
_CALL_PROPERTIES: dict[str, Any] = {
    "capability_id": {"type": "string", "description": "The capability, e.g. demo.echo."},
    "input": {
        "type": "object",
        "description": "The capability's input. A string may be ${steps.<id>.output.<path>}: "
        "an earlier step's output (exactly one reference: the value with its JSON type; "
        "inside longer text: the value as text).",
    },
    "connection_id": {"type": "string", "description": "Optional. The connection to use."},
}
_STEP_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {
            "type": "string",
            "pattern": STEP_ID_PATTERN,
            "description": "Unique in the plan; references name it.",
        },
        **_CALL_PROPERTIES,
        "when": {
            "type": "object",
            "description": "Optional. Run only if an earlier step ended in one of these "
            "statuses; otherwise the step is skipped.",
            "properties": {
                "step": {"type": "string"},
                "status": {"type": "array", "items": {"enum": [s.value for s in StepStatus]}},
            },
            "required": ["step", "status"],
        },
        "compensate": {
            "type": "object",
            "description": "Optional. The call that undoes this step (with on_failure "
            "'compensate'); it may use ${steps.<this id>.output...}.",
            "properties": _CALL_PROPERTIES,
            "required": ["capability_id", "input"],
        },
    },
    "required": ["id", "capability_id", "input"],
}
PLAN_TOOL_SPEC = types.Tool(
    name=PLAN_TOOL,
    title="Run a Moat plan",
    description=(
        "Run several Moat capability calls as one durable plan, in order, each step exactly "
        "once with its own receipt. A later step may use an earlier step's output through "
        "${steps.<id>.output.<path>}. Answers the plan: status (executed, failed, planned, "
        "accepted) and each step's status, receipt_id, output and error. The same plan again "
        "(same arguments, or the same idempotency_key) runs nothing twice."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "steps": {"type": "array", "minItems": 1, "maxItems": MAX_STEPS, "items": _STEP_SCHEMA},
            "on_failure": {
                "enum": [o.value for o in OnFailure],
                "description": "stop (default): the plan ends failed at the failing step. "
                "compensate: each executed step with a compensate call is undone, last first.",
            },
            "dry_run": {
                "type": "boolean",
                "description": "Check each step's policy and references only: nothing runs.",
            },
            KEY_ARGUMENT: {**_KEY_SCHEMA, "maxLength": MAX_PLAN_KEY_LENGTH},
        },
        "required": ["steps"],
        "additionalProperties": False,
    },
    # A plan may run any capability: what holds for the most consequential of them.
    annotations=types.ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=True
    ),
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
        annotations=capability_annotations(capability),
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


def derived_plan_key(plan: dict[str, Any]) -> str:
    """The key of a plan without one: the same canonical steps and failure rule, the same
    key."""
    canonical = rfc8785.dumps({"plan": plan})
    return "mcp:plan:sha256:" + hashlib.sha256(canonical).hexdigest()


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


def plan_result_of(result: PlanResult) -> types.CallToolResult:
    """The plan's envelope as structured content; a failed plan is a tool error, and a plan
    still going says how to ask again without running anything twice."""
    envelope = json.loads(result.envelope.model_dump_json())
    if result.status != "accepted":
        return types.CallToolResult(
            content=_text(envelope), structured_content=envelope, is_error=result.status == "failed"
        )
    ask = (
        f"call {PLAN_TOOL} again with the same arguments and "
        f"idempotency_key={result.envelope.idempotency_key!r}: it runs nothing twice"
    )
    approval = result.approval
    if approval is not None and approval.status == "pending":
        note = (
            f"Accepted, waiting for a person's approval of the whole plan ({approval.id}, until "
            f"{approval.expires_at.isoformat()}): no step has run yet. Tell the user approval "
            f"{approval.id} is needed; to see how it stands, {ask}."
        )
    else:
        note = f"Accepted: plan {result.plan_id} is still running. To see how it stands, {ask}."
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=note), *_text(envelope)],
        structured_content=envelope,
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
    fields += [
        f"step {problem.get('step')} {problem.get('where')}: {problem.get('message', '')}"
        for problem in error.details.get("problems", ())
        if isinstance(problem, dict)
    ]
    if fields:
        headline += " (" + "; ".join(fields) + ")"
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=headline), *_text(body)],
        structured_content=body,
        is_error=True,
    )
