"""The immutable records of every execution attempt: Receipt, OutcomeEvent and their enums."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from schemas.errors import ErrorCode
from schemas.provider_evidence import ProviderEvidence


class ExecutionStatus(StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"
    TIMEOUT = "timeout"
    POLICY_DENIED = "policy_denied"
    IDEMPOTENT_HIT = "idempotent_hit"


class ErrorTaxonomy(StrEnum):
    """Normalized error categories: what failed (the provider, the network, Moat, policy), so
    trust and retries can be judged by kind rather than by each provider's wording."""

    NONE = "none"
    PROVIDER_RATE_LIMITED = "provider_rate_limited"
    PROVIDER_AUTH_FAILURE = "provider_auth_failure"
    PROVIDER_SERVER_ERROR = "provider_server_error"
    PROVIDER_NOT_FOUND = "provider_not_found"
    PROVIDER_INVALID_INPUT = "provider_invalid_input"
    TIMEOUT = "timeout"
    NETWORK_ERROR = "network_error"
    GATEWAY_ERROR = "gateway_error"
    POLICY_DENIED = "policy_denied"
    UNKNOWN = "unknown"


# The error code a *success* receipt carries when the provider's answer was larger than the
# adapter reads: the call took effect, its output keeps only the size read and a hash.
RESPONSE_TRUNCATED = ErrorCode.PROVIDER_RESPONSE_TRUNCATED
# The error code of an execution whose effect may or may not have happened and could not be
# looked up (taxonomy ``timeout``): never retried blindly, dead-lettered for a person.
OUTCOME_UNKNOWN = ErrorCode.OUTCOME_UNKNOWN


def taxonomy_for_http_status(status: int) -> ErrorTaxonomy:
    """Map a provider's HTTP status to the taxonomy: 2xx/3xx none, 429 rate limited, 401/403
    auth failure, 404 not found, 408 timeout, other 4xx invalid input, 5xx server error."""
    if 200 <= status < 400:
        return ErrorTaxonomy.NONE
    if status == 429:
        return ErrorTaxonomy.PROVIDER_RATE_LIMITED
    if status in (401, 403):
        return ErrorTaxonomy.PROVIDER_AUTH_FAILURE
    if status == 404:
        return ErrorTaxonomy.PROVIDER_NOT_FOUND
    if status == 408:
        return ErrorTaxonomy.TIMEOUT
    if 400 <= status < 500:
        return ErrorTaxonomy.PROVIDER_INVALID_INPUT
    if status >= 500:
        return ErrorTaxonomy.PROVIDER_SERVER_ERROR
    return ErrorTaxonomy.UNKNOWN


class Receipt(BaseModel):
    """Immutable record of one capability execution attempt. Hashes only, never raw data."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(description="UUID v7 (time-ordered).")
    capability_id: str
    capability_version: str
    adapter_id: str
    tenant_id: str
    connection_id: str = Field(description="Connection (credential reference) used; '' if none.")
    request_id: str
    timestamp: datetime = Field(description="UTC time the execution was initiated.")
    latency_ms: int = Field(ge=0, description="Milliseconds from gateway receipt to outcome.")
    idempotency_key: str = Field(max_length=256)
    input_hash: str
    output_hash: str | None = None
    status: ExecutionStatus
    error_code: str | None = None
    http_status: int | None = None
    policy_decision_id: str
    is_synthetic: bool = False
    workflow_id: str = Field(description="Temporal workflow id of the run.")
    run_id: str = Field(description="Temporal run id of the run that recorded this receipt.")
    trace_id: str
    provider_evidence: ProviderEvidence | None = Field(
        default=None,
        description="What the effect left at the provider (schemas/provider_evidence.py); "
        "None for a call that made nothing there, or a receipt from before it was kept.",
    )


class OutcomeEvent(BaseModel):
    """Append-only telemetry per attempt, consumed by the trust plane."""

    model_config = ConfigDict(frozen=True)

    id: str
    receipt_id: str
    capability_id: str
    capability_version: str
    tenant_id: str
    success: bool
    latency_ms: int = Field(ge=0)
    error_taxonomy: ErrorTaxonomy
    http_status: int | None = None
    timestamp: datetime
    is_synthetic: bool = False
    adapter_id: str


class PolicyMode(StrEnum):
    STANDARD = "standard"
    STRICT = "strict"
    AUDIT = "audit"
    BYPASS = "bypass"


class RuleHit(StrEnum):
    ALLOWED = "ALLOWED"
    IDEMPOTENT_HIT = "IDEMPOTENT_HIT"
    SCOPE_MISSING = "SCOPE_MISSING"
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
    APPROVAL_REQUIRED = "APPROVAL_REQUIRED"
    BYPASSED = "BYPASSED"
    # A synthetic run whose key (the probe's creator) is revoked, or that carries none.
    KEY_REVOKED = "KEY_REVOKED"
    QUOTA_EXCEEDED = "QUOTA_EXCEEDED"
    # A plan's step covered by the approval of its whole plan.
    PLAN_APPROVED = "PLAN_APPROVED"


class Decision(StrEnum):
    ALLOW = "allow"
    DENY = "deny"
    WOULD_DENY = "would_deny"
