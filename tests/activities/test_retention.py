"""Manifest retention (90 days completed, 30 failed, 7 years compliance, never under the
idempotency window), run as the Temporal workflow the schedule starts."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import delete, select, update
from sqlalchemy.exc import DBAPIError

from schemas.names import RETENTION_WORKFLOW
from schemas.retention import (
    RetentionInput,
    RetentionReport,
    retention_for,
)
from starter.runtime.schedules import ensure_retention_schedule
from store import budgets
from store import events as event_log
from store.models import ManifestRow, Tenant
from tests.support.stack import Stack


async def manifests_of(stack: Stack, tenant_id: str) -> dict[str, ManifestRow]:
    async with stack.sessions() as s:
        rows = (await s.execute(select(ManifestRow).filter_by(tenant_id=tenant_id))).scalars()
        return {r.outcome: r for r in rows}


async def retain(stack: Stack, days: float) -> RetentionReport:
    as_of = datetime.now(UTC) + timedelta(days=days)
    return await stack.client.execute_workflow(
        RETENTION_WORKFLOW,
        RetentionInput(as_of=as_of),
        id=f"retention-test-{as_of:%s%f}",
        task_queue=stack.settings.task_queue,
        result_type=RetentionReport,
    )


async def test_retention_by_outcome_and_compliance(stack: Stack) -> None:
    standard = stack.tenant_id
    compliance, compliance_key = await stack.new_tenant()
    async with stack.sessions.begin() as s:
        await s.execute(update(Tenant).filter_by(id=compliance).values(retention_mode="compliance"))
        await budgets.set_budget(s, standard, "http.request", 0, "day")
    await stack.execute("demo.echo", {"keep": "90 days"}, key="ok")
    await stack.execute(
        "http.request", {"method": "GET", "url": "https://example.com/"}, key="denied"
    )  # budget 0: policy_denied, nothing sent
    await stack.execute("demo.echo", {"keep": "7 years"}, key="c", api_key=compliance_key)
    mine = await manifests_of(stack, standard)
    assert set(mine) == {"success", "policy_denied"}
    paths = {
        k: stack.settings.manifests_dir / standard / r.run_id / "manifest.json"
        for k, r in mine.items()
    }
    assert all(await asyncio.gather(*(asyncio.to_thread(p.exists) for p in paths.values())))

    await retain(stack, 1)  # inside every window: nothing goes
    assert set(await manifests_of(stack, standard)) == {"success", "policy_denied"}

    await retain(stack, 31)  # failed runs: 30 days
    assert set(await manifests_of(stack, standard)) == {"success"}
    assert not await asyncio.to_thread(paths["policy_denied"].exists)
    async with stack.sessions() as s:
        events = await event_log.events_of(s, standard, mine["policy_denied"].receipt_id)
    expired = [e for e in events if e.event_type == "MANIFEST_EXPIRED"]
    assert len(expired) == 1 and expired[0].event_data["sha256"] == mine["policy_denied"].sha256

    await retain(stack, 91)  # completed runs: 90 days
    assert await manifests_of(stack, standard) == {}
    assert set(await manifests_of(stack, compliance)) == {"success"}

    # Compliance: 7 years. The job's clock can be moved, the database's cannot: it refuses
    # to delete a compliance manifest younger than 7 years, and the file stays.
    report = await retain(stack, 7 * 365 + 3)
    assert report.refused == 1
    kept = await manifests_of(stack, compliance)
    assert set(kept) == {"success"}
    path = stack.settings.manifests_dir / compliance / kept["success"].run_id / "manifest.json"
    assert await asyncio.to_thread(path.exists)


def test_retention_periods() -> None:
    day = timedelta(days=1)
    assert retention_for("success", compliance=False, idempotency_ttl_seconds=86400) == 90 * day
    assert retention_for("failure", compliance=False, idempotency_ttl_seconds=86400) == 30 * day
    assert retention_for("timeout", compliance=False, idempotency_ttl_seconds=86400) == 30 * day
    assert retention_for("success", compliance=True, idempotency_ttl_seconds=86400) >= 7 * 365 * day
    # Never shorter than the tenant's idempotency window.
    assert (
        retention_for("failure", compliance=False, idempotency_ttl_seconds=40 * 86400) == 40 * day
    )


async def test_compliance_manifests_refuse_deletion(stack: Stack) -> None:
    tenant_id, key = await stack.new_tenant()
    async with stack.sessions.begin() as s:
        await s.execute(update(Tenant).filter_by(id=tenant_id).values(retention_mode="compliance"))
    await stack.execute("demo.echo", {"x": 1}, key="k", api_key=key)
    async with stack.sessions() as s:
        with pytest.raises(DBAPIError, match="kept 7 years"):
            await s.execute(delete(ManifestRow).filter_by(tenant_id=tenant_id))
        await s.rollback()


async def test_the_schedule_exists(stack: Stack) -> None:
    schedule_id = await ensure_retention_schedule(stack.client, stack.settings)
    assert await ensure_retention_schedule(stack.client, stack.settings) == schedule_id
    description = await stack.client.get_schedule_handle(schedule_id).describe()
    assert description.schedule.spec.intervals[0].every == timedelta(hours=1)
