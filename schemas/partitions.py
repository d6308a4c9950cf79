"""Monthly partitions of ``outcome_events``, created ahead by a Temporal Schedule: the
contracts of its workflow.

A row whose month has no partition lands in the default partition, and once it holds a
month's rows that month's partition can no longer be created; so the schedule keeps the
next months' partitions in place long before their first row (daily, three months ahead).
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

MONTHS_AHEAD = 3


class PartitionsInput(BaseModel):
    as_of: datetime | None = Field(
        default=None,
        description="Create partitions from this time's month (default: the run's start).",
    )
    months: int = Field(
        default=MONTHS_AHEAD, ge=1, le=24, description="How many months, this one included."
    )


class PartitionsReport(BaseModel):
    as_of: datetime
    months: list[str] = Field(description="The months (YYYY-MM) whose partition now exists.")
