"""The objects a tenant's log leaves name, read in batches for an export: manifests' index
rows, receipts, which manifests retention removed (their ``MANIFEST_EXPIRED`` event), and
where a time falls in the log. Every function runs in the caller's transaction, scoped to
the tenant (row-level security)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession

from schemas.events import EventType
from schemas.records import Receipt
from store.db import table_of
from store.models import ManifestRow, OrchestrationEvent, ReceiptRow

_RECEIPTS = table_of(ReceiptRow)
_EVENTS = table_of(OrchestrationEvent)


async def manifests(
    session: AsyncSession, tenant_id: str, ids: Sequence[str]
) -> dict[str, ManifestRow]:
    """The index rows of these manifests that are still indexed, by id."""
    if not ids:
        return {}
    rows = await session.scalars(
        select(ManifestRow).where(ManifestRow.tenant_id == tenant_id, ManifestRow.id.in_(ids))
    )
    return {row.id: row for row in rows}


async def receipts(session: AsyncSession, tenant_id: str, ids: Sequence[str]) -> dict[str, Receipt]:
    """These receipts as stored, by id."""
    if not ids:
        return {}
    rows = await session.execute(
        select(*_RECEIPTS.c).where(_RECEIPTS.c.tenant_id == tenant_id, _RECEIPTS.c.id.in_(ids))
    )
    return {row["id"]: Receipt.model_validate(dict(row)) for row in rows.mappings()}


async def expired_manifests(session: AsyncSession, tenant_id: str, ids: Sequence[str]) -> set[str]:
    """Those of these manifests whose removal retention recorded."""
    if not ids:
        return set()
    rows = await session.scalars(
        select(_EVENTS.c.aggregate_id).where(
            _EVENTS.c.tenant_id == tenant_id,
            _EVENTS.c.event_type == EventType.MANIFEST_EXPIRED.value,
            _EVENTS.c.aggregate_id.in_(ids),
        )
    )
    return set(rows)


async def first_index_since(session: AsyncSession, tenant_id: str, since: datetime) -> int | None:
    """The first sequenced leaf recorded at or after ``since`` (None: none was)."""
    found = await session.scalar(
        text(
            "SELECT min(leaf_index) FROM log_leaves WHERE tenant_id = :t "
            "AND recorded_at >= :since AND leaf_index IS NOT NULL"
        ),
        {"t": tenant_id, "since": since},
    )
    return int(found) if found is not None else None
