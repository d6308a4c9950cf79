"""Synthetic probes: their configuration, one row per probe, under row-level security."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from store.models import ProbeRow
from store.pages import keyset


def new_probe_id() -> str:
    return "prb_" + secrets.token_hex(8)


async def insert_probe(
    session: AsyncSession,
    tenant_id: str,
    capability_id: str,
    capability_version: str | None,
    input: dict[str, Any],
    connection_id: str | None,
    interval_seconds: int,
    *,
    api_key_id: str,
    scopes: Sequence[str],
) -> ProbeRow:
    row = ProbeRow(
        id=new_probe_id(),
        tenant_id=tenant_id,
        capability_id=capability_id,
        capability_version=capability_version,
        input=input,
        connection_id=connection_id,
        interval_seconds=interval_seconds,
        paused=False,
        api_key_id=api_key_id,
        scopes=list(scopes),
    )
    session.add(row)
    await session.flush()
    await session.refresh(row)
    return row


async def get_probe(session: AsyncSession, tenant_id: str, probe_id: str) -> ProbeRow | None:
    row = await session.execute(select(ProbeRow).filter_by(tenant_id=tenant_id, id=probe_id))
    return row.scalar_one_or_none()


async def list_probes(
    session: AsyncSession,
    tenant_id: str,
    after: tuple[Any, ...] | None = None,
    limit: int | None = None,
) -> Sequence[ProbeRow]:
    stmt = select(ProbeRow).filter_by(tenant_id=tenant_id)
    stmt = keyset(stmt, (ProbeRow.created_at, ProbeRow.id), after, limit, newest_first=False)
    return (await session.execute(stmt)).scalars().all()


async def set_paused(
    session: AsyncSession,
    row: ProbeRow,
    paused: bool,
    *,
    lent_by: tuple[str, Sequence[str]] | None = None,
) -> ProbeRow:
    """Pause or resume; ``lent_by`` (key id, scopes): the key whose authority the probe's
    runs carry from now on."""
    row.paused = paused
    if lent_by is not None:
        row.api_key_id, scopes = lent_by
        row.scopes = list(scopes)
    await session.flush()
    return row


async def delete_probe(session: AsyncSession, row: ProbeRow) -> None:
    await session.delete(row)
    await session.flush()
