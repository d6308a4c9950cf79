"""Per-tenant quotas: how many of each kind of record a tenant may hold at once.

The defaults are settings (``MOAT_QUOTA_<NAME>``); an admin may set a tenant's own limit
for any of them, which wins over the default until it is cleared.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, field_validator

# The most any quota may be set to: a limit, not a way to switch quotas off.
MAX_QUOTA = 1_000_000


class Quota(StrEnum):
    WEBHOOKS = "webhooks"
    PROBES = "probes"
    CONNECTIONS = "connections"
    PENDING_APPROVALS = "pending_approvals"
    POLICY_VERSIONS = "policy_versions"


# What each quota counts, and what frees a slot: said in every quota_exceeded refusal.
COUNTS: dict[Quota, str] = {
    Quota.WEBHOOKS: "webhook subscriptions not removed",
    Quota.PROBES: "synthetic probes, paused ones included",
    Quota.CONNECTIONS: "connections not revoked",
    Quota.PENDING_APPROVALS: "calls waiting for a person's approval",
    Quota.POLICY_VERSIONS: "stored policy versions",
}
FREE_A_SLOT: dict[Quota, str] = {
    Quota.WEBHOOKS: "remove one (DELETE /v1/webhooks/{id})",
    Quota.PROBES: "remove one (DELETE /v1/probes/{id})",
    Quota.CONNECTIONS: "revoke one you no longer use (DELETE /v1/connections/{id})",
    Quota.PENDING_APPROVALS: "approve or reject some (POST /v1/approvals/{id}/approve|reject)",
    Quota.POLICY_VERSIONS: "versions are kept as history and cannot be deleted",
}

DEFAULT_QUOTAS: dict[Quota, int] = {
    Quota.WEBHOOKS: 25,
    Quota.PROBES: 50,
    Quota.CONNECTIONS: 200,
    Quota.PENDING_APPROVALS: 500,
    Quota.POLICY_VERSIONS: 1000,
}

QuotaLimits = dict[Quota, int]


class QuotaState(BaseModel):
    """One quota of a tenant: its limit, where the limit comes from, and the usage now."""

    quota: Quota
    limit: int = Field(description="The most the tenant may hold at once.")
    usage: int = Field(description="How many it holds now.")
    source: str = Field(description="`default` (a MOAT_QUOTA_* setting) or `tenant` (an admin's).")
    counts: str = Field(description="What the quota counts.")


class TenantQuotas(BaseModel):
    """Every quota of a tenant, with its current usage."""

    tenant_id: str
    quotas: list[QuotaState]


class QuotaUpdate(BaseModel):
    """The tenant's own limits to set: a number sets it, null goes back to the default, a
    quota left out keeps what it has."""

    model_config = ConfigDict(extra="forbid")

    webhooks: int | None = Field(default=None, ge=0, le=MAX_QUOTA)
    probes: int | None = Field(default=None, ge=0, le=MAX_QUOTA)
    connections: int | None = Field(default=None, ge=0, le=MAX_QUOTA)
    pending_approvals: int | None = Field(default=None, ge=0, le=MAX_QUOTA)
    policy_versions: int | None = Field(default=None, ge=0, le=MAX_QUOTA)

    @field_validator("*", mode="before")
    @classmethod
    def _not_a_boolean(cls, value: object) -> object:
        if isinstance(value, bool):  # JSON true/false is no number, though Python's is
            raise ValueError("a limit is a whole number or null")
        return value

    def changes(self) -> dict[Quota, int | None]:
        """The quotas named in the body, each with its new limit (None: the default)."""
        return {Quota(name): getattr(self, name) for name in self.model_fields_set}


def exceeded(quota: Quota, limit: int, usage: int, source: str) -> tuple[str, dict[str, object]]:
    """The message and details of a ``quota_exceeded`` refusal: which quota, its limit,
    the usage now, and what to do."""
    message = (
        f"The tenant holds {usage} {COUNTS[quota]}, and its {quota.value} quota is {limit}: "
        f"{FREE_A_SLOT[quota]}, or ask an admin to raise the quota "
        f"(PATCH /v1/admin/tenants/{{id}}/quotas, or `moat tenant quotas TENANT --set "
        f"{quota.value}=N`)."
    )
    return message, {"quota": quota.value, "limit": limit, "usage": usage, "source": source}
