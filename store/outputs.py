"""What Moat keeps of an execution's answer: its redacted output (and a failure's provider
details), sealed with the codec's keys, one row per receipt until its idempotency window
closes. A replay answers from here; the retention job deletes what has expired."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from sqlalchemy import delete, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from schemas.execute import KeptOutput
from store.db import table_of
from store.keyrings.codec import OutputSealer
from store.models import ExecutionOutputRow

_OUTPUTS = table_of(ExecutionOutputRow)
# Every execution with an answer keeps it: built once, executed with fresh parameters only.
_KEEP = insert(_OUTPUTS).on_conflict_do_nothing(index_elements=[_OUTPUTS.c.receipt_id])


def _context(tenant_id: str, receipt_id: str) -> bytes:
    return f"moat-output|{tenant_id}|{receipt_id}".encode()


# ``keep`` for as long as the execution's claim on its key lasts, read in the same statement.
_KEEP_WHILE_CLAIMED = text(
    "INSERT INTO execution_outputs (receipt_id, tenant_id, key_id, sealed, expires_at)"
    " VALUES (:receipt_id, :tenant_id, :key_id, :sealed, coalesce((SELECT k.expires_at"
    " FROM idempotency_keys k WHERE k.tenant_id = :claim_tenant AND k.idempotency_key = :key"
    " AND k.receipt_id = :claim_receipt), :expires_at))"
    " ON CONFLICT (receipt_id) DO NOTHING"
)


async def keep(
    session: AsyncSession,
    sealer: OutputSealer,
    tenant_id: str,
    receipt_id: str,
    kept: KeptOutput,
    expires_at: datetime,
    *,
    claimed_key: str | None = None,
) -> None:
    """Store the output of a receipt (once: a retried step finds it there) until
    ``expires_at``, or, with ``claimed_key``, until the execution's claim on that key
    expires (``expires_at`` when it holds none)."""
    # Compact JSON with keys in the order the adapter gave them: served back as it is, so a
    # replay's output is the first answer's, byte for byte.
    plaintext = json.dumps(
        kept.model_dump(mode="json"), ensure_ascii=False, separators=(",", ":")
    ).encode()
    kid, sealed = sealer.seal(plaintext, _context(tenant_id, receipt_id))
    row = {
        "receipt_id": receipt_id,
        "tenant_id": tenant_id,
        "key_id": kid,
        "sealed": sealed,
        "expires_at": expires_at,
    }
    if claimed_key is None:
        await session.execute(_KEEP, row)
    else:
        claim = {"key": claimed_key, "claim_tenant": tenant_id, "claim_receipt": receipt_id}
        await session.execute(_KEEP_WHILE_CLAIMED, {**row, **claim})


async def find(
    session: AsyncSession, sealer: OutputSealer, tenant_id: str, receipt_id: str, now: datetime
) -> KeptOutput | None:
    """The kept output of a receipt; None once its window has closed (deleted or not yet)."""
    row = (
        await session.execute(
            select(ExecutionOutputRow).where(
                ExecutionOutputRow.tenant_id == tenant_id,
                ExecutionOutputRow.receipt_id == receipt_id,
                ExecutionOutputRow.expires_at > now,
            )
        )
    ).scalar_one_or_none()
    if row is None:
        return None
    return opened(sealer, row)


class Sealed(Protocol):
    """A kept output as stored: an ``ExecutionOutputRow``, or a ``SealedOutput`` read
    without the ORM."""

    @property
    def receipt_id(self) -> str: ...
    @property
    def tenant_id(self) -> str: ...
    @property
    def key_id(self) -> str: ...
    @property
    def sealed(self) -> bytes: ...
    @property
    def expires_at(self) -> datetime: ...


@dataclass(frozen=True, slots=True)
class SealedOutput:
    """A kept output's row, read in driver SQL (``idempotency.replay_authenticated``)."""

    receipt_id: str
    tenant_id: str
    key_id: str
    sealed: bytes
    expires_at: datetime


def opened(sealer: OutputSealer, row: Sealed) -> KeptOutput:
    """The output a row keeps, unsealed (its tenant and receipt bound as associated data)."""
    plaintext = sealer.open(row.key_id, row.sealed, _context(row.tenant_id, row.receipt_id))
    return KeptOutput.model_validate_json(plaintext)


async def delete_expired(session: AsyncSession, tenant_id: str, as_of: datetime) -> int:
    """Delete the tenant's outputs whose window closed by ``as_of``; how many went."""
    result = await session.execute(
        delete(ExecutionOutputRow)
        .where(ExecutionOutputRow.tenant_id == tenant_id, ExecutionOutputRow.expires_at <= as_of)
        .returning(ExecutionOutputRow.receipt_id)
    )
    return len(result.scalars().all())
