"""Pydantic v2 contracts shared by the gateway, the client, workflows and activities.

Pure and free of I/O, so the workflow sandbox can import it.

Its names load on first use: a process that needs one contract (the CLI its settings) does
not build every model of the package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_HOMES = {
    "canonical_bytes": "schemas.canonical",
    "sha256_digest": "schemas.canonical",
    "BUILTIN_CAPABILITIES": "schemas.capabilities",
    "CapabilityCatalog": "schemas.capabilities",
    "CapabilitySpec": "schemas.capabilities",
    "EffectType": "schemas.capabilities",
    "RetrySettings": "schemas.capabilities",
    "Envelope": "schemas.execute",
    "EnvelopeStatus": "schemas.execute",
    "ErrorBody": "schemas.execute",
    "ExecuteRequest": "schemas.execute",
    "envelope_for_receipt": "schemas.execute",
    "Decision": "schemas.records",
    "ErrorTaxonomy": "schemas.records",
    "ExecutionStatus": "schemas.records",
    "OutcomeEvent": "schemas.records",
    "PolicyMode": "schemas.records",
    "Receipt": "schemas.records",
    "RuleHit": "schemas.records",
    "taxonomy_for_http_status": "schemas.records",
    "redact": "schemas.redaction",
    "redacted_hash": "schemas.redaction",
    "ExecuteResult": "schemas.run",
    "ExecuteWorkflowInput": "schemas.run",
}

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


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
