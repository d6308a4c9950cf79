"""Temporal Schedules Moat keeps: manifest retention (hourly), the partitions of
``outcome_events`` created ahead of their months (daily), the trust rollup's refresh (every
minute), the sweep of runs an operator terminated or cancelled (every five minutes), the
transparency log's checkpoints (every minute by default) and one per synthetic probe."""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.service import RPCError, RPCStatusCode

from schemas.cancels import CancelSweepInput
from schemas.checkpoints import LogCheckpointInput
from schemas.names import (
    CANCEL_SWEEP_SCHEDULE_ID,
    CANCEL_SWEEP_WORKFLOW,
    LOG_CHECKPOINT_SCHEDULE_ID,
    LOG_CHECKPOINT_WORKFLOW,
    PARTITIONS_SCHEDULE_ID,
    PARTITIONS_WORKFLOW,
    PROBE_SCHEDULE_PREFIX,
    PROBE_WORKFLOW,
    RETENTION_SCHEDULE_ID,
    RETENTION_WORKFLOW,
    TRUST_REFRESH_WORKFLOW,
    TRUST_SCHEDULE_ID,
)
from schemas.partitions import PartitionsInput
from schemas.probes import ProbeRunInput, TrustRefreshInput
from schemas.retention import RetentionInput
from schemas.settings import MoatSettings
from workflows.fairness import tenant_priority


async def _ensure_interval_schedule(
    client: Client,
    settings: MoatSettings,
    schedule_id: str,
    workflow: str,
    arg: Any,
    every: timedelta,
) -> str:
    """Create a schedule that starts ``workflow`` every ``every`` on the task queue, a turn
    skipped while the last run goes on, unless it exists; returns its id."""
    with contextlib.suppress(ScheduleAlreadyRunningError):
        await client.create_schedule(
            schedule_id,
            Schedule(
                action=ScheduleActionStartWorkflow(
                    workflow, arg, id=f"{schedule_id}-run", task_queue=settings.task_queue
                ),
                spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every)]),
                policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
            ),
        )
    return schedule_id


async def ensure_retention_schedule(
    client: Client, settings: MoatSettings, every: timedelta = timedelta(hours=1)
) -> str:
    """Create the retention schedule unless it exists; returns its id."""
    return await _ensure_interval_schedule(
        client, settings, RETENTION_SCHEDULE_ID, RETENTION_WORKFLOW, RetentionInput(), every
    )


async def ensure_partitions_schedule(
    client: Client, settings: MoatSettings, every: timedelta = timedelta(days=1)
) -> str:
    """Create the partitions schedule unless it exists; returns its id. Daily, three months
    ahead: a month's partition exists two months before its first row, so neither a worker
    that runs for months nor a day of Temporal outage lets a row reach the default
    partition."""
    return await _ensure_interval_schedule(
        client, settings, PARTITIONS_SCHEDULE_ID, PARTITIONS_WORKFLOW, PartitionsInput(), every
    )


async def ensure_trust_schedule(client: Client, settings: MoatSettings) -> str:
    """Create the trust rollup's schedule unless it exists; returns its id."""
    return await _ensure_interval_schedule(
        client,
        settings,
        TRUST_SCHEDULE_ID,
        TRUST_REFRESH_WORKFLOW,
        TrustRefreshInput(),
        timedelta(seconds=settings.trust_refresh_seconds),
    )


async def ensure_cancel_sweep_schedule(
    client: Client, settings: MoatSettings, every: timedelta = timedelta(minutes=5)
) -> str:
    """Create the cancel sweep's schedule unless it exists; returns its id."""
    return await _ensure_interval_schedule(
        client, settings, CANCEL_SWEEP_SCHEDULE_ID, CANCEL_SWEEP_WORKFLOW, CancelSweepInput(), every
    )


async def ensure_log_checkpoint_schedule(client: Client, settings: MoatSettings) -> str:
    """Create the transparency log's checkpoint schedule unless it exists; returns its id."""
    every = timedelta(seconds=settings.log_checkpoint_interval_seconds)
    return await _ensure_interval_schedule(
        client,
        settings,
        LOG_CHECKPOINT_SCHEDULE_ID,
        LOG_CHECKPOINT_WORKFLOW,
        LogCheckpointInput(),
        every,
    )


def probe_schedule_id(probe_id: str) -> str:
    return f"{PROBE_SCHEDULE_PREFIX}{probe_id}"


async def create_probe_schedule(
    client: Client, settings: MoatSettings, tenant_id: str, probe_id: str, every: timedelta
) -> str:
    """The schedule that runs a probe every ``every``; a probe that fires while its last run
    is still going skips that turn."""
    schedule_id = probe_schedule_id(probe_id)
    await client.create_schedule(
        schedule_id,
        Schedule(
            action=ScheduleActionStartWorkflow(
                PROBE_WORKFLOW,
                ProbeRunInput(tenant_id=tenant_id, probe_id=probe_id),
                id=f"{schedule_id}-run",
                # Off the execution path: the probe's run, and the execution it starts as a
                # child on its parent's queue, use the delivery worker's slots and HTTP pool.
                task_queue=settings.deliveries_task_queue,
                priority=tenant_priority(tenant_id, settings.fairness_weight_of(tenant_id)),
            ),
            spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every)]),
            policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
        ),
    )
    return schedule_id


async def move_probe_schedules(client: Client, settings: MoatSettings) -> int:
    """Point every probe schedule that starts its runs on this deployment's execution queue
    at the probes' delivery queue; returns how many were moved.
    Idempotent: every worker runs it at start."""
    moved = 0
    async for listed in await client.list_schedules():
        if not listed.id.startswith(PROBE_SCHEDULE_PREFIX):
            continue
        handle = client.get_schedule_handle(listed.id)
        action = (await handle.describe()).schedule.action
        if not isinstance(action, ScheduleActionStartWorkflow):
            continue
        if action.task_queue != settings.task_queue:
            continue  # moved already, or another deployment's

        def to_deliveries(update: ScheduleUpdateInput) -> ScheduleUpdate | None:
            schedule = update.description.schedule
            if not isinstance(schedule.action, ScheduleActionStartWorkflow):
                return None
            schedule.action.task_queue = settings.deliveries_task_queue
            return ScheduleUpdate(schedule=schedule)

        await handle.update(to_deliveries)
        moved += 1
    return moved


async def pause_probe_schedule(client: Client, probe_id: str, paused: bool) -> None:
    handle = client.get_schedule_handle(probe_schedule_id(probe_id))
    if paused:
        await handle.pause(note="moat probe pause")
    else:
        await handle.unpause(note="moat probe resume")


async def delete_probe_schedule(client: Client, probe_id: str) -> None:
    """Gone already (deleted by hand) is fine: the probe is removed either way."""
    try:
        await client.get_schedule_handle(probe_schedule_id(probe_id)).delete()
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
