"""Bodies of the HTTP API besides the execute envelope: errors, pages of receipts, the
capability list and the admin resources (tenants, API keys)."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.capabilities import EffectType, ProbeSpec, RetrySettings
from schemas.execute import Envelope, ErrorBody
from schemas.hosts import AllowHosts
from schemas.records import PolicyMode, Receipt

# Printable names without control characters; Postgres text cannot hold NUL anyway.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9 ._@-]*$"
KEY_NAME_PATTERN = r"^[A-Za-z0-9 ._@:-]*$"
MAX_TTL_SECONDS = 30 * 24 * 3600


class ErrorEnvelope(Envelope):
    """The envelope of every refused request: ``status`` "failed" and an ``error``."""

    status: Literal["failed"] = "failed"  # type: ignore[assignment]
    error: ErrorBody


class ReceiptPage(BaseModel):
    """One page of receipts, newest first; pass ``next_cursor`` back as ``cursor``."""

    items: list[Receipt]
    next_cursor: str | None = Field(
        default=None, description="Opaque cursor of the next page; null on the last page."
    )


class CapabilityInfo(BaseModel):
    """A capability as ``GET /v1/capabilities`` lists it."""

    id: str
    version: str
    adapter: str
    adapter_id: str
    description: str
    effect_type: EffectType
    required_scopes: list[str]
    timeout_seconds: float
    requires_approval: bool
    retry: RetrySettings
    input_schema: dict[str, Any] = Field(description="JSON Schema of the capability's input.")
    probe: ProbeSpec | None = Field(
        default=None,
        description="How the synthetic prober may call it with no side effect; null: never.",
    )


class TenantCreate(BaseModel):
    """Body of ``POST /v1/admin/tenants``."""

    name: str = Field(min_length=1, max_length=200, pattern=NAME_PATTERN)
    policy_mode: PolicyMode = PolicyMode.STANDARD
    idempotency_ttl_seconds: int | None = Field(
        default=None,
        ge=60,
        le=MAX_TTL_SECONDS,
        description="Idempotency window; unset: the server's default (24 h).",
    )


class TenantInfo(BaseModel):
    id: str
    name: str
    policy_mode: PolicyMode
    idempotency_ttl_seconds: int
    created_at: datetime
    http_allow_hosts: list[str] = Field(
        default_factory=list,
        description="Non-public hosts this tenant's http.request may call besides the "
        "worker's own list: host (ports 80 and 443) or host:port.",
    )


class TenantUpdate(BaseModel):
    """Body of ``PATCH /v1/admin/tenants/{tenant_id}``: the fields to change."""

    model_config = ConfigDict(extra="forbid")

    http_allow_hosts: AllowHosts | None = Field(
        default=None,
        description="Replaces the tenant's allow-list: host (ports 80 and 443) or host:port, "
        "IPv6 as [address]:port; [] empties it.",
        examples=[["api.example.com", "10.0.0.5:8443"]],
    )


class ApiKeyCreate(BaseModel):
    """Body of ``POST /v1/admin/tenants/{tenant_id}/keys``."""

    name: str = Field(default="", max_length=200, pattern=KEY_NAME_PATTERN)


class ApiKeyInfo(BaseModel):
    """An API key without its secret. ``prefix`` is the public part (``moat_<id>_``)."""

    id: str
    tenant_id: str
    name: str
    prefix: str
    created_at: datetime
    revoked_at: datetime | None = None


class NewApiKey(ApiKeyInfo):
    """A key just created: ``api_key`` is the secret, shown this once and never again."""

    api_key: str


class NewTenant(BaseModel):
    tenant: TenantInfo
    api_key: NewApiKey


class BudgetInfo(BaseModel):
    """A budget and where it stands in the current period."""

    capability_id: str
    limit: int
    period: Literal["day", "month"]
    period_start: date
    used: int = Field(description="Successful executions counted this period.")
    in_flight: int = Field(description="Executions allowed and not recorded yet.")
