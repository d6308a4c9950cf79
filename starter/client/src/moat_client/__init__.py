"""Moat's Python client: execute capabilities through a Moat gateway.

    async with MoatClient("http://127.0.0.1:8000", api_key) as moat:
        result = await moat.execute("demo.echo", {"hello": "world"}, idempotency_key="run-1:step-1")
        print(result.status, result.receipt_id, result.replayed)

A retry with the same idempotency key never causes a second side effect: it returns the
first execution's receipt (``result.replayed`` is then True).

The client is its own distribution (``moat-client``, httpx and pydantic only) and imports
nothing of the server, so an agent installs it without Temporal or PostgreSQL.
"""

from moat_client._client import REPLAYED_HEADER, ExecutionResult, MoatClient, MoatError
from moat_client._sync import MoatClientSync
from moat_client.models import (
    CapabilityInfo,
    Envelope,
    EnvelopeStatus,
    ErrorBody,
    Plan,
    Receipt,
    ReceiptPage,
    RetrySettings,
)

__all__ = [
    "REPLAYED_HEADER",
    "CapabilityInfo",
    "Envelope",
    "EnvelopeStatus",
    "ErrorBody",
    "ExecutionResult",
    "MoatClient",
    "MoatClientSync",
    "MoatError",
    "Plan",
    "Receipt",
    "ReceiptPage",
    "RetrySettings",
]
