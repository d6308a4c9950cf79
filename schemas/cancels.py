"""The cancel sweep's contracts: executions whose Temporal run an operator terminated or
cancelled before it recorded an outcome get ``RUN_CANCELLED`` in their event chain.

Terminating a run runs none of its code, so nothing inside the run can record it: a
scheduled sweep reads the closed runs from Temporal's visibility and appends the event.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

# How far back the sweep looks at closed runs: wide enough that a sweep missed for a while
# (a worker down, the schedule paused) still finds them; what it already recorded it skips.
DEFAULT_WINDOW_SECONDS = 2 * 24 * 3600


class CancelSweepInput(BaseModel):
    as_of: datetime | None = Field(
        default=None, description="Look back from this time (default: the sweep's start)."
    )
    window_seconds: int = Field(default=DEFAULT_WINDOW_SECONDS, ge=1)
    tenant_id: str | None = Field(
        default=None, description="One tenant's runs only (None: every tenant's)."
    )


class CancelSweepReport(BaseModel):
    as_of: datetime
    checked: int = Field(default=0, description="Terminated or cancelled runs looked at.")
    cancelled: list[str] = Field(
        default_factory=list, description="Receipt ids that got their RUN_CANCELLED now."
    )
