"""Idempotency claims: which execution holds a tenant's key, until when."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Row, bindparam, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from schemas.records import Receipt
from store.db import table_of
from store.models import ExecutionOutputRow, IdempotencyClaim, ReceiptRow
from store.receipts import to_receipt


@dataclass(frozen=True)
class Claim:
    key: str
    receipt_id: str
    input_hash: str
    workflow_id: str
    first_seen_at: datetime
    expires_at: datetime
    taken_now: bool = False  # claim_key: this call took it (or re-armed it once expired)


_CLAIMS = table_of(IdempotencyClaim)
_RE_ARMED = ("receipt_id", "input_hash", "workflow_id", "first_seen_at", "expires_at")
# Every execution claims its key: built once, executed with fresh parameters only. Taken
# when free, re-armed once expired; the holder is read when neither.
_NEW_CLAIM = insert(_CLAIMS)
_CLAIM = _NEW_CLAIM.on_conflict_do_update(
    index_elements=[_CLAIMS.c.tenant_id, _CLAIMS.c.idempotency_key],
    set_={k: _NEW_CLAIM.excluded[k] for k in _RE_ARMED},
    where=_CLAIMS.c.expires_at <= bindparam("now"),
).returning(*_CLAIMS.c)
_HOLDER = select(*_CLAIMS.c).where(
    _CLAIMS.c.tenant_id == bindparam("tenant_id"),
    _CLAIMS.c.idempotency_key == bindparam("idempotency_key"),
)


def _claim(row: IdempotencyClaim | Row[Any], *, taken_now: bool = False) -> Claim:
    return Claim(
        key=row.idempotency_key,
        receipt_id=row.receipt_id,
        input_hash=row.input_hash,
        workflow_id=row.workflow_id,
        first_seen_at=row.first_seen_at,
        expires_at=row.expires_at,
        taken_now=taken_now,
    )


async def find_live_claim(
    session: AsyncSession, tenant_id: str, key: str, now: datetime
) -> tuple[Claim, Receipt | None] | None:
    """The unexpired claim on a key, with its receipt once recorded."""
    result = await session.execute(
        select(IdempotencyClaim, ReceiptRow)
        .outerjoin(ReceiptRow, ReceiptRow.id == IdempotencyClaim.receipt_id)
        .where(
            IdempotencyClaim.tenant_id == tenant_id,
            IdempotencyClaim.idempotency_key == key,
            IdempotencyClaim.expires_at > now,
        )
    )
    row = result.one_or_none()
    if row is None:
        return None
    claim, receipt = row
    return _claim(claim), (to_receipt(receipt) if receipt is not None else None)


async def find_replay(
    session: AsyncSession, tenant_id: str, key: str, now: datetime
) -> tuple[Claim, Receipt | None, ExecutionOutputRow | None] | None:
    """``find_live_claim`` with the receipt's kept output row (sealed; None once expired), in
    one statement: what a replay answers from."""
    result = await session.execute(
        select(IdempotencyClaim, ReceiptRow, ExecutionOutputRow)
        .outerjoin(ReceiptRow, ReceiptRow.id == IdempotencyClaim.receipt_id)
        .outerjoin(
            ExecutionOutputRow,
            (ExecutionOutputRow.receipt_id == ReceiptRow.id)
            & (ExecutionOutputRow.tenant_id == tenant_id)
            & (ExecutionOutputRow.expires_at > now),
        )
        .where(
            IdempotencyClaim.tenant_id == tenant_id,
            IdempotencyClaim.idempotency_key == key,
            IdempotencyClaim.expires_at > now,
        )
    )
    row = result.one_or_none()
    if row is None:
        return None
    claim, receipt, output = row
    return _claim(claim), (to_receipt(receipt) if receipt is not None else None), output


async def find_claim_by_receipt(
    session: AsyncSession, tenant_id: str, receipt_id: str
) -> Claim | None:
    """The claim an execution made on its key (a run still in progress has no receipt)."""
    row = (
        await session.execute(
            select(IdempotencyClaim).where(
                IdempotencyClaim.tenant_id == tenant_id,
                IdempotencyClaim.receipt_id == receipt_id,
            )
        )
    ).scalar_one_or_none()
    return _claim(row) if row is not None else None


async def claim_key(
    session: AsyncSession,
    *,
    tenant_id: str,
    key: str,
    receipt_id: str,
    input_hash: str,
    workflow_id: str,
    now: datetime,
    ttl_seconds: int,
) -> Claim:
    """Claim a key for an execution, or re-arm it once expired; returns the holder.

    The holder is this execution when its ``receipt_id`` comes back, another one otherwise.
    """
    values = {
        "tenant_id": tenant_id,
        "idempotency_key": key,
        "receipt_id": receipt_id,
        "input_hash": input_hash,
        "workflow_id": workflow_id,
        "first_seen_at": now,
        "expires_at": now + timedelta(seconds=ttl_seconds),
        "now": now,
    }
    won = (await session.execute(_CLAIM, values)).first()
    if won is not None:
        return _claim(won, taken_now=True)
    held = (await session.execute(_HOLDER, values)).first()
    assert held is not None
    return _claim(held)
