"""How long run manifests are kept (never less than the idempotency window; 90 days for
completed runs, 30 for failed ones, 7 years in compliance mode), and the retention job's
contracts."""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, Field

IDEMPOTENCY_WINDOW_MINIMUM = timedelta(hours=24)
COMPLETED = timedelta(days=90)
FAILED = timedelta(days=30)
COMPLIANCE = timedelta(days=7 * 365 + 2)  # 7 years, leap days included


def retention_for(outcome: str, *, compliance: bool, idempotency_ttl_seconds: int) -> timedelta:
    """How long a manifest of this outcome is kept: never less than the tenant's idempotency
    window (24 h minimum); 90 days for completed runs, 30 for failed and dead-lettered ones;
    7 years in compliance mode."""
    if compliance:
        return COMPLIANCE
    base = COMPLETED if outcome == "success" else FAILED
    return max(base, IDEMPOTENCY_WINDOW_MINIMUM, timedelta(seconds=idempotency_ttl_seconds))


class RetentionInput(BaseModel):
    as_of: datetime | None = Field(
        default=None, description="Judge expiry as of this time (default: the run's start)."
    )
    batch_size: int = Field(default=500, ge=1, le=10_000)


class RetentionReport(BaseModel):
    as_of: datetime
    tenants: int = 0
    deleted: int = 0
    kept: int = 0
    outputs_deleted: int = Field(
        default=0, description="Kept outputs deleted: their idempotency window had closed."
    )
    refused: int = Field(
        default=0,
        description="Expired by the clock but kept by the database "
        "(compliance mode refuses deletion before 7 years).",
    )
