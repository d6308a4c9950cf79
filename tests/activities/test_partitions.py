"""Monthly partitions of ``outcome_events`` are created ahead by a Temporal Schedule: as the
clock moves on, every outcome event lands in its own month's partition, never in the
default one (where a month's rows would block its partition for good)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy import text
from temporalio.client import Client
from temporalio.service import RPCError

from schemas.names import PARTITIONS_SCHEDULE_ID, PARTITIONS_WORKFLOW
from schemas.partitions import MONTHS_AHEAD, PartitionsInput, PartitionsReport
from schemas.records import ErrorTaxonomy, OutcomeEvent
from starter.runtime.schedules import ensure_partitions_schedule
from store import receipts
from tests.support.stack import Stack


async def _run_as_scheduled(stack: Stack, as_of: datetime) -> PartitionsReport:
    """The schedule's workflow as it runs on day ``as_of``."""
    report: PartitionsReport = await stack.client.execute_workflow(
        PARTITIONS_WORKFLOW,
        PartitionsInput(as_of=as_of),
        id=f"partitions-{uuid.uuid4().hex}",
        task_queue=stack.settings.task_queue,
        result_type=PartitionsReport,
    )
    return report


def _event(tenant_id: str, at: datetime) -> OutcomeEvent:
    return OutcomeEvent(
        id=str(uuid.uuid4()),
        receipt_id=str(uuid.uuid4()),
        capability_id="demo.echo",
        capability_version="1.0.0",
        tenant_id=tenant_id,
        success=True,
        latency_ms=1,
        error_taxonomy=ErrorTaxonomy.NONE,
        timestamp=at,
        adapter_id="echo",
    )


async def test_every_row_lands_in_its_month_as_the_clock_moves(stack: Stack) -> None:
    # Years ahead, so the months are the test's own; fourteen monthly ticks of the clock,
    # each followed by rows dated up to two months past it (what a worker writes before
    # the next ticks: the schedule runs daily, three months ahead).
    start = datetime(2031, 1, 15, 12, tzinfo=UTC)
    written: dict[str, str] = {}
    for month in range(14):
        now = start + timedelta(days=30.5 * month)
        report = await _run_as_scheduled(stack, now)
        assert report.months == receipts.months_from(now, MONTHS_AHEAD)
        async with stack.sessions.begin() as session:
            for days in (0, 29, 58):
                event = _event(stack.tenant_id, now + timedelta(days=days))
                await receipts.insert_outcome_event(session, event)
                written[event.id] = f"outcome_events_{event.timestamp:%Y_%m}"
    async with stack.sessions() as session:
        rows = await session.execute(
            text("SELECT id, tableoid::regclass::text FROM outcome_events WHERE id = ANY(:ids)"),
            {"ids": list(written)},
        )
        landed = {row[0]: row[1] for row in rows}
    assert landed == written


async def test_the_schedule_creates_the_months_ahead(stack: Stack) -> None:
    await _without_an_earlier_schedule(stack.client)
    schedule_id = await ensure_partitions_schedule(stack.client, stack.settings)
    assert await ensure_partitions_schedule(stack.client, stack.settings) == schedule_id
    handle = stack.client.get_schedule_handle(schedule_id)
    description = await handle.describe()
    assert description.schedule.spec.intervals[0].every == timedelta(days=1)
    await handle.trigger()
    report = await _scheduled_run(stack.client, schedule_id)
    assert report.months == receipts.months_from(report.as_of, MONTHS_AHEAD)
    async with stack.sessions() as session:
        for month in report.months:
            name = f"outcome_events_{month.replace('-', '_')}"
            assert await session.scalar(text("SELECT to_regclass(:n)::text"), {"n": name}) == name


async def _without_an_earlier_schedule(client: Client) -> None:
    """The schedule is one per namespace: another test's stack may have made it, for a task
    queue no worker polls any more, with its run still waiting there."""
    with contextlib.suppress(RPCError):
        await client.get_schedule_handle(PARTITIONS_SCHEDULE_ID).delete()
    with contextlib.suppress(RPCError):
        await client.get_workflow_handle(f"{PARTITIONS_SCHEDULE_ID}-run").terminate()


async def _scheduled_run(client: Client, schedule_id: str) -> PartitionsReport:
    handle = client.get_schedule_handle(schedule_id)
    for _ in range(200):
        actions = (await handle.describe()).info.recent_actions
        if actions:
            started = actions[-1].action
            run = client.get_workflow_handle(
                started.workflow_id,  # type: ignore[attr-defined]
                result_type=PartitionsReport,
            )
            return await run.result()
        await asyncio.sleep(0.05)
    raise AssertionError("the schedule started no run")
