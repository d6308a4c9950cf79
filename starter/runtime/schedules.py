"""Temporal Schedules Moat keeps: manifest retention (hourly)."""

from __future__ import annotations

import contextlib
from datetime import timedelta

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
)

from schemas.names import RETENTION_SCHEDULE_ID, RETENTION_WORKFLOW
from schemas.retention import RetentionInput
from schemas.settings import MoatSettings


async def ensure_retention_schedule(
    client: Client, settings: MoatSettings, every: timedelta = timedelta(hours=1)
) -> str:
    """Create the retention schedule unless it exists; returns its id."""
    with contextlib.suppress(ScheduleAlreadyRunningError):
        await client.create_schedule(
            RETENTION_SCHEDULE_ID,
            Schedule(
                action=ScheduleActionStartWorkflow(
                    RETENTION_WORKFLOW,
                    RetentionInput(),
                    id=f"{RETENTION_SCHEDULE_ID}-run",
                    task_queue=settings.task_queue,
                ),
                spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every)]),
                policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
            ),
        )
    return RETENTION_SCHEDULE_ID
