"""Budgets: how many successful executions of a capability a tenant may make per period,
and where each stands (used, held by executions in flight)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession

from schemas.api import BudgetInfo
from store import budgets


async def set_budget(
    session: AsyncSession, tenant_id: str, capability_id: str, limit: int, period: str
) -> None:
    """Set (or replace) the budget of a capability for the transaction's tenant."""
    await budgets.set_budget(session, tenant_id, capability_id, limit, period)


async def list_budgets(session: AsyncSession, tenant_id: str, now: datetime) -> list[BudgetInfo]:
    """Every budget of the tenant and where it stands in the period ``now`` falls in."""
    return [
        BudgetInfo(
            capability_id=capability_id,
            limit=state.limit,
            period=state.period,
            period_start=state.period_start,
            used=state.used,
            in_flight=state.held,
        )
        for capability_id, state in await budgets.list_budgets(session, tenant_id, now)
    ]
