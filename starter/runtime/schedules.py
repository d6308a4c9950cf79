"""Temporal Schedules Moat keeps: manifest retention (hourly) and the partitions of
``outcome_events`` created ahead of their months (daily)."""

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

from schemas.names import (
    PARTITIONS_SCHEDULE_ID,
    PARTITIONS_WORKFLOW,
    RETENTION_SCHEDULE_ID,
    RETENTION_WORKFLOW,
)
from schemas.partitions import PartitionsInput
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


async def ensure_partitions_schedule(
    client: Client, settings: MoatSettings, every: timedelta = timedelta(days=1)
) -> str:
    """Create the partitions schedule unless it exists; returns its id. Daily, three months
    ahead: a month's partition exists two months before its first row, so neither a worker
    that runs for months nor a day of Temporal outage lets a row reach the default
    partition."""
    with contextlib.suppress(ScheduleAlreadyRunningError):
        await client.create_schedule(
            PARTITIONS_SCHEDULE_ID,
            Schedule(
                action=ScheduleActionStartWorkflow(
                    PARTITIONS_WORKFLOW,
                    PartitionsInput(),
                    id=f"{PARTITIONS_SCHEDULE_ID}-run",
                    task_queue=settings.task_queue,
                ),
                spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every)]),
                policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
            ),
        )
    return PARTITIONS_SCHEDULE_ID
