"""The synthetic prober's contracts: which capabilities may be probed (the catalog's
``ProbeSpec``), a probe's configuration, and the inputs of its workflow and activities.

A probe runs a capability through the normal execute path on a schedule, marked
``is_synthetic``: no budget, no webhook, scored apart from real traffic. It must never
cause a real side effect by accident, so only a capability whose catalog entry declares a
safe probe can be probed, and only with an input that entry allows. Its runs carry the
authority of the key that created (or last resumed) it, and are held to that key's scopes,
to the tenant's approvals and to the key staying unrevoked, like the key's own calls.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from schemas.capabilities import ProbeSpec
from schemas.run import ExecuteWorkflowInput

__all__ = [
    "ProbeCreate",
    "ProbeInfo",
    "ProbeRunInput",
    "ProbeRunResult",
    "ProbeSpec",
    "ProbeStart",
    "ProbeStartInput",
    "TrustRefreshInput",
    "TrustRefreshReport",
]


class ProbeCreate(BaseModel):
    """Body of ``POST /v1/probes`` (and what ``moat probe add`` sends)."""

    model_config = ConfigDict(extra="forbid")

    capability_id: str = Field(min_length=1, max_length=200)
    capability_version: str | None = Field(default=None, max_length=50)
    input: dict[str, Any] | None = Field(
        default=None, description="Null: the capability's own probe input."
    )
    connection_id: str | None = Field(default=None, max_length=200)
    interval_seconds: int = Field(default=60, ge=1, le=7 * 24 * 3600)


class ProbeInfo(BaseModel):
    id: str
    tenant_id: str
    capability_id: str
    capability_version: str | None
    input: dict[str, Any]
    connection_id: str | None
    interval_seconds: int
    paused: bool
    schedule_id: str
    created_at: datetime
    api_key_id: str | None = Field(
        default=None,
        description="The key whose authority the probe's runs carry (who created or last "
        "resumed it); null: made before probes carried one, not run until resumed.",
    )


class ProbeRunInput(BaseModel):
    """What a probe's schedule starts ``RunProbe`` with: which probe, nothing else (the
    worker reads the rest from Postgres, under the tenant's row-level security)."""

    tenant_id: str
    probe_id: str


class ProbeStartInput(BaseModel):
    tenant_id: str
    probe_id: str
    idempotency_key: str


class ProbeStart(BaseModel):
    """The signed start of the probe's execution, or why there is none this time."""

    request: ExecuteWorkflowInput | None = None
    workflow_id: str | None = None
    skipped: str | None = None


class ProbeRunResult(BaseModel):
    receipt_id: str | None = None
    status: str | None = None
    skipped: str | None = None


class TrustRefreshInput(BaseModel):
    """Input of ``RefreshTrust`` (started every minute by its schedule)."""

    tenant_id: str | None = Field(default=None, description="None: every tenant.")


class TrustRefreshReport(BaseModel):
    tenants: int = 0
