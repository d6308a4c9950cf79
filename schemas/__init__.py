"""Pydantic v2 contracts shared by the gateway, the client, workflows and activities.

Pure and free of I/O, so the workflow sandbox can import it.
"""

from schemas.canonical import canonical_bytes, sha256_digest
from schemas.capabilities import (
    BUILTIN_CAPABILITIES,
    CapabilityCatalog,
    CapabilitySpec,
    EffectType,
    RetrySettings,
)
from schemas.execute import (
    Envelope,
    EnvelopeStatus,
    ErrorBody,
    ExecuteRequest,
    envelope_for_receipt,
)
from schemas.records import (
    Decision,
    ErrorTaxonomy,
    ExecutionStatus,
    OutcomeEvent,
    PolicyMode,
    Receipt,
    RuleHit,
    taxonomy_for_http_status,
)
from schemas.redaction import redact, redacted_hash
from schemas.run import ExecuteResult, ExecuteWorkflowInput

__all__ = [
    "BUILTIN_CAPABILITIES",
    "CapabilityCatalog",
    "CapabilitySpec",
    "Decision",
    "EffectType",
    "Envelope",
    "EnvelopeStatus",
    "ErrorBody",
    "ErrorTaxonomy",
    "ExecuteRequest",
    "ExecuteResult",
    "ExecuteWorkflowInput",
    "ExecutionStatus",
    "OutcomeEvent",
    "PolicyMode",
    "Receipt",
    "RetrySettings",
    "RuleHit",
    "canonical_bytes",
    "envelope_for_receipt",
    "redact",
    "redacted_hash",
    "sha256_digest",
    "taxonomy_for_http_status",
]
