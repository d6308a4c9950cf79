"""Idempotent hits: one counter per execution whose stored answer was replayed."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.dml import ReturningInsert

from store.models import IdempotentHitRow


@dataclass
class Hits:
    """Replays of one execution counted since the last flush."""

    tenant_id: str
    receipt_id: str
    capability_id: str
    idempotency_key: str
    hits: int
    first_hit_at: datetime
    last_hit_at: datetime


async def add_hits(session: AsyncSession, batch: Iterable[Hits]) -> None:
    """Add each execution's new hits to its counter, in one statement. The caller has named
    the batch's tenant (row-level security)."""
    rows = [vars(h) for h in batch]
    if rows:
        # The rows as parameters of one fixed statement, compiled once, however many
        # executions a flush carries; sent as one multi-row VALUES statement.
        await session.execute(_ADD_HITS, rows)


def _add_hits() -> ReturningInsert[tuple[str]]:
    stmt = insert(IdempotentHitRow)
    # RETURNING lets SQLAlchemy send the rows as one multi-row VALUES ("insertmanyvalues")
    # rather than the driver's statement per row.
    return stmt.on_conflict_do_update(
        index_elements=[IdempotentHitRow.tenant_id, IdempotentHitRow.receipt_id],
        set_={
            "hits": IdempotentHitRow.hits + stmt.excluded.hits,
            "first_hit_at": func.least(IdempotentHitRow.first_hit_at, stmt.excluded.first_hit_at),
            "last_hit_at": func.greatest(IdempotentHitRow.last_hit_at, stmt.excluded.last_hit_at),
        },
    ).returning(IdempotentHitRow.receipt_id)


_ADD_HITS = _add_hits()


async def hits_of(session: AsyncSession, tenant_id: str, receipt_id: str) -> int:
    """How many replays of an execution are recorded (0: none yet)."""
    count = await session.scalar(
        select(IdempotentHitRow.hits).where(
            IdempotentHitRow.tenant_id == tenant_id, IdempotentHitRow.receipt_id == receipt_id
        )
    )
    return count or 0
