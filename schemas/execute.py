"""The execute request, the response envelope and the error body."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from schemas.approvals import ApprovalRef
from schemas.errors import ErrorCode
from schemas.names import REFUSED_TARGET
from schemas.records import RESPONSE_TRUNCATED, ExecutionStatus, Receipt

SUPPORTED_SCHEMA_VERSIONS = ("1",)
MAX_IDEMPOTENCY_KEY_LENGTH = 256


class ExecuteRequest(BaseModel):
    """Body of ``POST /v1/executions``."""

    # Strict: JSON types as documented (no `0` for false, no number for a string).
    model_config = ConfigDict(extra="forbid", strict=True)

    schema_version: str = Field(description='Request schema version; "1".')
    capability_id: str = Field(min_length=1, max_length=200)
    capability_version: str | None = Field(default=None, max_length=50)
    input: dict[str, Any]
    idempotency_key: str | None = Field(
        default=None, min_length=1, max_length=MAX_IDEMPOTENCY_KEY_LENGTH
    )
    connection_id: str | None = Field(default=None, max_length=200)
    dry_run: bool = Field(
        default=False,
        description="Evaluate and record the policy decision only: nothing is executed, no "
        "budget is used, the idempotency key is not taken. Answers status 'planned'.",
    )


class EnvelopeStatus(StrEnum):
    ACCEPTED = "accepted"
    PLANNED = "planned"
    EXECUTED = "executed"
    FAILED = "failed"


class ErrorBody(BaseModel):
    code: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class Plan(BaseModel):
    """What a dry run found: the decision the execution would run under."""

    policy_decision_id: str
    decision: str
    rule_hit: str
    mode: str
    reason: str = ""


class KeptOutput(BaseModel):
    """What Moat keeps of an execution's answer for its idempotency window (sealed, in
    ``execution_outputs``): the redacted output of a success, or what the provider said
    when it refused."""

    output: Any = None
    error_details: dict[str, Any] | None = None


class Envelope(BaseModel):
    """Every answer of the execute API, success or not."""

    receipt_id: str | None = None
    trace_id: str
    status: EnvelopeStatus
    idempotency_key: str | None = None
    workflow_id: str | None = None
    run_id: str | None = None
    receipt: Receipt | None = None
    output: Any = Field(
        default=None,
        description="`executed` only: the adapter's result, redacted (`demo.echo`: its input; "
        "`http.request`: `status`, selected `headers`, `body` as JSON when the answer is JSON, "
        "else as text, cut at MOAT_HTTP_MAX_RESPONSE_BYTES with `truncated: true`). "
        "`sha256` of its RFC 8785 form is `receipt.output_hash`. Kept for the idempotency "
        "window, so a replay answers the same output; afterwards null, with `output_expired`.",
    )
    output_expired: bool = Field(
        default=False,
        description="`executed` only: the output is no longer kept (its idempotency window "
        "closed), so `output` is null; `receipt.output_hash` still names it.",
    )
    plan: Plan | None = None
    approval: ApprovalRef | None = Field(
        default=None,
        description="`accepted` only: the person's approval the run waits for (strict "
        "policy). Every request with the key answers the same one until it is decided.",
    )
    error: ErrorBody | None = None
    warnings: list[ErrorBody] = Field(
        default_factory=list,
        description="What the caller should know about an `executed` run, e.g. "
        "`provider_response_truncated`: the provider's answer was larger than Moat reads.",
    )
    replayed: bool = Field(
        default=False,
        description="`true` only when this answer is a stored receipt recorded before this "
        "request (an idempotent hit: nothing ran for it), as `X-Moat-Idempotent-Replayed` "
        "says. A request that attached to a run still going for its key (e.g. a retry "
        "after a client timeout) waited for that run and is not a replay.",
    )


ERROR_MESSAGES: dict[str, str] = {
    ErrorCode.PROVIDER_RATE_LIMITED: "The provider rate-limited the call and retries ran out.",
    ErrorCode.PROVIDER_AUTH_FAILURE: "The provider refused the credentials (401/403).",
    ErrorCode.PROVIDER_SERVER_ERROR: "The provider failed with a server error and retries ran out.",
    ErrorCode.PROVIDER_NOT_FOUND: "The provider answered 404 Not Found.",
    ErrorCode.PROVIDER_INVALID_INPUT: "The provider rejected the input (4xx).",
    ErrorCode.TIMEOUT: "The provider did not answer within the capability's timeout.",
    ErrorCode.NETWORK_ERROR: "The provider could not be reached (DNS, connection or TLS failure).",
    ErrorCode.GATEWAY_ERROR: "Moat failed internally; the trace id identifies the fault.",
    ErrorCode.POLICY_DENIED: "Policy denied the execution.",
    ErrorCode.BUDGET_EXCEEDED: "The tenant's budget for this capability is used up for the period.",
    ErrorCode.QUOTA_EXCEEDED: (
        "The tenant has as many calls waiting for approval as its pending_approvals quota allows "
        "(details: limit, usage): approve or reject some, then call again with a new key, or ask "
        "an admin to raise the quota."
    ),
    ErrorCode.HOST_NOT_ALLOWED: (
        "The target host is not allowed (loopback/private or not allow-listed): an operator can "
        "add it to the tenant's allow-list (`moat tenant allow-hosts`, or PATCH "
        "/v1/admin/tenants/{id}) or to the worker's (MOAT_HTTP_ALLOW_HOSTS)."
    ),
    ErrorCode.PROVIDER_INVALID_RESPONSE: (
        "The provider answered with a body Moat cannot record (e.g. JSON nested too deeply); the "
        "call may have taken effect, so it was not retried."
    ),
    ErrorCode.SCHEMA_VALIDATION_FAILED: "The input does not match the capability's input schema.",
    ErrorCode.SCOPE_MISSING: "The API key lacks a scope this capability needs.",
    ErrorCode.KEY_REVOKED: (
        "The API key this run acts for (a probe's creator) is revoked: resume the probe with a "
        "live key that holds what executing it needs."
    ),
    ErrorCode.CONNECTION_REVOKED: "The connection was revoked: add a new one and use its id.",
    ErrorCode.CONNECTION_NOT_FOUND: "The tenant has no such connection.",
    ErrorCode.CONNECTION_NEEDS_REAUTH: (
        "The provider refused the connection for good (an OAuth grant revoked, a GitHub "
        "App uninstalled): connect it again (`moat connection connect` for OAuth 2, a new "
        "connection for an App), then run the call again."
    ),
    ErrorCode.UNKNOWN: "The execution failed for an unknown reason.",
    ErrorCode.OUTCOME_UNKNOWN: (
        "The provider may or may not have performed the effect, and Moat could not look it up "
        "(e.g. the connection cannot read the channel's history): it was not retried, so as not "
        "to do it twice. Check the provider, then run it again with a new key if it did not "
        "happen."
    ),
}

WARNING_MESSAGES: dict[str, str] = {
    RESPONSE_TRUNCATED: "The provider's answer was larger than the most Moat reads "
    "(MOAT_HTTP_MAX_RESPONSE_BYTES): the call took effect, and `output.body` holds only its "
    "first bytes, as text, with `truncated: true`.",
}


def envelope_for_receipt(
    receipt: Receipt, kept: KeptOutput | None = None, *, replayed: bool = False
) -> Envelope:
    """The envelope of a finished execution, fresh or replayed alike, with what is kept of
    its answer (None: nothing, or no longer); ``replayed`` for a receipt recorded before
    the request it answers."""
    if receipt.status == ExecutionStatus.SUCCESS:
        # A success's error code, when it has one, is a warning (the receipt is all a replay
        # has, so fresh and replayed answers say the same).
        code = receipt.error_code
        warnings = [ErrorBody(code=code, message=WARNING_MESSAGES.get(code, code))] if code else []
        return Envelope(
            receipt_id=receipt.id,
            trace_id=receipt.trace_id,
            status=EnvelopeStatus.EXECUTED,
            idempotency_key=receipt.idempotency_key,
            workflow_id=receipt.workflow_id,
            run_id=receipt.run_id,
            receipt=receipt,
            output=kept.output if kept is not None else None,
            output_expired=kept is None,
            warnings=warnings,
            replayed=replayed,
        )
    code = receipt.error_code or ErrorCode.UNKNOWN
    details: dict[str, Any] = {"receipt_status": receipt.status.value}
    if receipt.http_status is not None:
        details["provider_status"] = receipt.http_status
    if kept is not None and kept.error_details:
        details.update(kept.error_details)
    return Envelope(
        receipt_id=receipt.id,
        trace_id=receipt.trace_id,
        status=EnvelopeStatus.FAILED,
        idempotency_key=receipt.idempotency_key,
        workflow_id=receipt.workflow_id,
        run_id=receipt.run_id,
        receipt=receipt,
        error=ErrorBody(
            code=code, message=_error_message(code, details, receipt.tenant_id), details=details
        ),
        replayed=replayed,
    )


def _error_message(code: str, details: dict[str, Any], tenant_id: str) -> str:
    """The code's message; a refused host's names the host and port, and the entry that
    would admit them on the tenant's list."""
    refused = details.get(REFUSED_TARGET)
    if code != ErrorCode.HOST_NOT_ALLOWED or not isinstance(refused, dict):
        return ERROR_MESSAGES.get(code, code)
    host, port, entry = refused.get("host"), refused.get("port"), refused.get("allow_entry")
    return (
        f"The target host {host} (port {port}) is not allowed (loopback/private or not "
        f"allow-listed): an operator can add {entry} to tenant {tenant_id}'s allow-list "
        f"(`moat tenant allow-hosts {tenant_id} ENTRY…`, which sets the whole list, or PATCH "
        f"/v1/admin/tenants/{tenant_id}) or to the worker's (MOAT_HTTP_ALLOW_HOSTS)."
    )
