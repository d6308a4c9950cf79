"""A tenant's own operations-alert route (``alert_routes``): the connection and target its
alerts go to, and the key whose authority (id and scopes) they are sent with."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import delete
from sqlalchemy.ext.asyncio import AsyncSession

from store.models import AlertRouteRow


async def get(session: AsyncSession, tenant_id: str) -> AlertRouteRow | None:
    row = await session.get(AlertRouteRow, tenant_id)
    return row if row is not None and row.tenant_id == tenant_id else None


async def put(
    session: AsyncSession,
    *,
    tenant_id: str,
    connection_id: str,
    target: str,
    api_key_id: str,
    scopes: Sequence[str],
    created_by: str,
    now: datetime,
) -> AlertRouteRow:
    """Set (or replace) the tenant's route; only flushed."""
    row = await get(session, tenant_id)
    if row is None:
        row = AlertRouteRow(tenant_id=tenant_id, created_at=now)
        session.add(row)
    row.connection_id = connection_id
    row.target = target
    row.api_key_id = api_key_id
    row.scopes = list(scopes)
    row.created_by = created_by
    row.updated_at = now
    await session.flush()
    return row


async def clear(session: AsyncSession, tenant_id: str) -> bool:
    result = await session.execute(
        delete(AlertRouteRow).where(AlertRouteRow.tenant_id == tenant_id)
    )
    return bool(getattr(result, "rowcount", 0))
