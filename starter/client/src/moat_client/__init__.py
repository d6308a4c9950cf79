"""Moat's Python client: execute capabilities through a Moat gateway.

    from moat_client import MoatClient

    with MoatClient() as moat:           # MOAT_URL, MOAT_API_KEY
        result = moat.execute("demo.echo", {"hello": "world"}, idempotency_key="run-1:step-1")
        print(result.status, result.receipt_id, result.replayed)

A retry with the same idempotency key never causes a second side effect: it returns the
first execution's receipt (``result.replayed`` is then True). The client retries network
errors, timeouts and 5xx with the same key by itself, and polls runs that outlast the
gateway's wait. ``run_plan`` runs several calls as one durable plan, each step once.
``AsyncMoatClient`` is the same for asyncio; ``SendLog`` keeps a local
record of every send (``client.send``).

The client is its own distribution (``moat-client``, httpx and pydantic only) and imports
nothing of the server, so an agent installs it without Temporal or PostgreSQL.
"""

from moat_client._async import AsyncMoatClient
from moat_client._config import ConfigurationError, RetryPolicy, configured
from moat_client._results import REPLAYED_HEADER, ExecutionResult, PlanResult
from moat_client._sync import MoatClient
from moat_client.codes import ClientErrorCode, ErrorCode
from moat_client.errors import (
    ApprovalExpired,
    ApprovalRejected,
    ApprovalRequired,
    BudgetExceeded,
    ExecutionPending,
    Forbidden,
    GatewayUnavailable,
    HostNotAllowed,
    IdempotencyKeyReused,
    InvalidRequest,
    MoatError,
    NotFound,
    PolicyDenied,
    Unauthenticated,
)
from moat_client.keys import cycle_timestamp, send_key
from moat_client.models import (
    ApprovalRef,
    CapabilityInfo,
    Envelope,
    EnvelopeStatus,
    ErrorBody,
    Plan,
    PlanEnvelope,
    PlanStatus,
    PlanStep,
    ProbeSpec,
    Receipt,
    ReceiptPage,
    RetrySettings,
)
from moat_client.sendlog import DeadLetter, SendLog, SendOutcome, SendRecord

# The blocking client's name before it became ``MoatClient``; kept for one release.
MoatClientSync = MoatClient

__all__ = [
    "REPLAYED_HEADER",
    "ApprovalExpired",
    "ApprovalRef",
    "ApprovalRejected",
    "ApprovalRequired",
    "AsyncMoatClient",
    "BudgetExceeded",
    "CapabilityInfo",
    "ClientErrorCode",
    "ConfigurationError",
    "DeadLetter",
    "Envelope",
    "EnvelopeStatus",
    "ErrorBody",
    "ErrorCode",
    "ExecutionPending",
    "ExecutionResult",
    "Forbidden",
    "GatewayUnavailable",
    "HostNotAllowed",
    "IdempotencyKeyReused",
    "InvalidRequest",
    "MoatClient",
    "MoatClientSync",
    "MoatError",
    "NotFound",
    "Plan",
    "PlanEnvelope",
    "PlanResult",
    "PlanStatus",
    "PlanStep",
    "PolicyDenied",
    "ProbeSpec",
    "Receipt",
    "ReceiptPage",
    "RetryPolicy",
    "RetrySettings",
    "SendLog",
    "SendOutcome",
    "SendRecord",
    "Unauthenticated",
    "configured",
    "cycle_timestamp",
    "send_key",
]
