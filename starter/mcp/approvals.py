"""An approver's tools: list the calls waiting for a person, show one, decide it.

They call the gateway's approval routes with the session's API key, so the same service
decides with the same rules: ``approvals:read`` to list and show, ``approvals:write`` to
decide, the key as the actor (``key:<id>``), separation of duties, and the decision bound
to the digest (``input_hash``) and ``policy_version`` the show tool returned. They are
listed to every session, as the capability tools are: a key without the scope gets the
gateway's ``scope_missing``, and a scope granted later works at once.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import mcp_types as types
from mcp.shared.exceptions import MCPError
from moat_client import MoatError
from moat_client.errors import error_for
from moat_client.models import ErrorBody

from schemas.redaction import REDACTED
from starter.mcp.annotations import moat_annotations

LIST_TOOL = "moat_list_approvals"
SHOW_TOOL = "moat_show_approval"
DECIDE_TOOL = "moat_decide_approval"
APPROVAL_TOOLS = frozenset({LIST_TOOL, SHOW_TOOL, DECIDE_TOOL})
_ID = re.compile(r"^apr_[0-9a-f]{1,60}$")
_STATUSES = ["pending", "approved", "rejected", "expired", "all"]
# What a listing shows of each approval (its input only through the show tool).
_LISTED = (
    "id",
    "status",
    "capability_id",
    "capability_version",
    "requested_by",
    "input_hash",
    "policy_version",
    "requested_at",
    "expires_at",
    "decided_by",
    "decided_at",
    "receipt_id",
)
_APPROVAL_ID = {"type": "string", "pattern": _ID.pattern, "description": "apr_…, as listed."}

LIST_SPEC = types.Tool(
    name=LIST_TOOL,
    title="List Moat approvals",
    description=(
        "The calls waiting for a person's approval (status 'pending' by default), newest "
        "first: capability, requester, digest (input_hash), policy version, expiry. Needs "
        f"scope approvals:read. Read one with {SHOW_TOOL} before deciding it."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "status": {"enum": _STATUSES, "description": "Only these; 'all' for every one."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 200},
        },
        "additionalProperties": False,
    },
    annotations=moat_annotations(read_only=True),
)
SHOW_SPEC = types.Tool(
    name=SHOW_TOOL,
    title="Show a Moat approval",
    description=(
        "One approval with the call's input (secrets redacted; 'hidden' lists where), its "
        "digest (input_hash) and policy version: pass both to "
        f"{DECIDE_TOOL}. Needs scope approvals:read."
    ),
    input_schema={
        "type": "object",
        "properties": {"approval_id": _APPROVAL_ID},
        "required": ["approval_id"],
        "additionalProperties": False,
    },
    annotations=moat_annotations(read_only=True),
)
DECIDE_SPEC = types.Tool(
    name=DECIDE_TOOL,
    title="Decide a Moat approval",
    description=(
        "Approve or reject the exact call a person was shown: input_hash and policy_version "
        f"must be the ones {SHOW_TOOL} returned (approval_mismatch otherwise, and nothing "
        "changes). Needs scope approvals:write; the key that made the call may not approve "
        "it (self_approval_forbidden). Only on a person's instruction."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "approval_id": _APPROVAL_ID,
            "action": {"enum": ["approve", "reject"]},
            "input_hash": {"type": "string", "minLength": 1, "maxLength": 80},
            "policy_version": {"type": "integer", "minimum": 0},
            "comment": {"type": "string", "minLength": 1, "maxLength": 1000},
        },
        "required": ["approval_id", "action", "input_hash", "policy_version", "comment"],
        "additionalProperties": False,
    },
    annotations=moat_annotations(read_only=False, destructive=True),
)
APPROVAL_SPECS = [LIST_SPEC, SHOW_SPEC, DECIDE_SPEC]


def hidden_paths(value: Any, path: str = "input") -> list[str]:
    """Where redaction hid something in an approval's input, as paths."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in hidden_paths(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in hidden_paths(v, f"{path}[{i}]")]
    return [path] if isinstance(value, str) and REDACTED in value else []


def _approval_id(arguments: dict[str, Any]) -> str:
    approval_id = arguments.get("approval_id")
    if not isinstance(approval_id, str) or not _ID.fullmatch(approval_id):
        # It becomes part of a URL path: anything else could name another route.
        raise MCPError(code=types.INVALID_PARAMS, message="approval_id must be apr_ and hex")
    return approval_id


def _refusal(response: httpx.Response) -> MoatError:
    try:
        body = response.json()
        error = ErrorBody.model_validate(body["error"])
        trace_id = str(body.get("trace_id", ""))
    except (ValueError, KeyError, TypeError):
        error = ErrorBody(code="http_error", message=response.text[:200])
        trace_id = ""
    return error_for(response.status_code, error, trace_id)


class ApproverTools:
    """The three tools over one gateway, with each session's key."""

    def __init__(self, url: str, http: httpx.AsyncClient) -> None:
        self._url = url.rstrip("/") + "/v1/approvals"
        self._http = http

    async def call(self, api_key: str, name: str, arguments: dict[str, Any]) -> Any:
        """The gateway's answer (JSON), or ``MoatError`` raised with its refusal."""
        headers = {"Authorization": f"Bearer {api_key}"}
        if name == LIST_TOOL:
            status = arguments.get("status", "pending")
            limit = arguments.get("limit", 50)
            if status not in _STATUSES or not isinstance(limit, int) or not 1 <= limit <= 200:
                raise MCPError(code=types.INVALID_PARAMS, message="status or limit out of range")
            params: dict[str, Any] = {"limit": limit}
            if status != "all":
                params["status"] = status
            page = await self._answer(self._http.get(self._url, params=params, headers=headers))
            items = [{k: a.get(k) for k in _LISTED} for a in page.get("items", [])]
            return {"approvals": items, "more": bool(page.get("next_cursor"))}
        approval_id = _approval_id(arguments)
        if name == SHOW_TOOL:
            shown = await self._answer(
                self._http.get(f"{self._url}/{approval_id}", headers=headers)
            )
            return {**shown, "hidden": hidden_paths(shown.get("input"))}
        action = arguments.get("action")
        if action not in ("approve", "reject"):
            raise MCPError(code=types.INVALID_PARAMS, message="action must be approve or reject")
        body = {k: arguments.get(k) for k in ("input_hash", "policy_version", "comment")}
        url = f"{self._url}/{approval_id}/{action}"
        return await self._answer(self._http.post(url, json=body, headers=headers))

    @staticmethod
    async def _answer(sent: Any) -> Any:
        response: httpx.Response = await sent
        if response.status_code >= 400:
            raise _refusal(response)
        return response.json()


def approval_result(answer: Any) -> types.CallToolResult:
    text = json.dumps(answer, ensure_ascii=False, indent=1)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=answer
    )
