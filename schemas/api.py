"""Bodies of the HTTP API besides the execute envelope: errors, pages of receipts, the
capability list and the admin resources (tenants, API keys)."""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from schemas.capabilities import EffectType, IdempotencyStrategy, ProbeSpec, RetrySettings
from schemas.execute import Envelope, ErrorBody
from schemas.hosts import AllowHosts
from schemas.records import PolicyMode, Receipt
from schemas.scopes import DEFAULT_SCOPES, MAX_SCOPE_LENGTH, SCOPE_PATTERN

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
    connection_types: list[str] = Field(
        default_factory=list,
        description="Connection types a request may name with `connection_id`; empty: none.",
    )
    retry: RetrySettings
    idempotency: IdempotencyStrategy = Field(
        description="How a repeated attempt is kept from a second effect: `provider_key` (the "
        "provider dedupes on Moat's key), `reconcile` (Moat marks what it creates and looks "
        "for the mark before any repeat), `natural` (repeating the call leaves the same "
        "state) or `none`."
    )
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
    allow_bypass: bool = Field(default=False, description="May set policy mode `bypass`.")


class TenantUpdate(BaseModel):
    """Body of ``PATCH /v1/admin/tenants/{tenant_id}``: the fields to change."""

    model_config = ConfigDict(extra="forbid")

    allow_bypass: StrictBool | None = Field(
        default=None, description="Whether the tenant may set policy mode `bypass`."
    )
    http_allow_hosts: AllowHosts | None = Field(
        default=None,
        description="Replaces the tenant's allow-list: host (ports 80 and 443) or host:port, "
        "IPv6 as [address]:port; [] empties it.",
        examples=[["api.example.com", "10.0.0.5:8443"]],
    )


Scope = Annotated[str, Field(max_length=MAX_SCOPE_LENGTH, pattern=SCOPE_PATTERN)]


class ApiKeyCreate(BaseModel):
    """Body of ``POST /v1/admin/tenants/{tenant_id}/keys``."""

    name: str = Field(default="", max_length=200, pattern=KEY_NAME_PATTERN)
    scopes: list[Scope] = Field(
        default_factory=lambda: list(DEFAULT_SCOPES),
        min_length=1,
        max_length=50,
        description="What the key may do: `execute:*` (every capability) and "
        "`outputs:read` (read what executions answered) by default; `execute:<capability "
        "id>`, `connections:write`, `webhooks:write`, … (`GET /v1/capabilities` and the "
        "route table in docs/security.md name them). A trailing `*` grants every scope "
        "starting with what precedes it.",
        examples=[["execute:*", "connections:write"]],
    )


class ApiKeyInfo(BaseModel):
    """An API key without its secret. ``prefix`` is the public part (``moat_<id>_``)."""

    id: str
    tenant_id: str
    name: str
    prefix: str
    created_at: datetime
    revoked_at: datetime | None = None
    scopes: list[str] = Field(default_factory=lambda: list(DEFAULT_SCOPES))


class WhoAmI(BaseModel):
    """Who a request acts as: the tenant its API key belongs to, and that key (its public
    prefix, never its secret) with its scopes."""

    tenant_id: str
    tenant_name: str
    key_id: str
    key_prefix: str
    scopes: list[str]


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
