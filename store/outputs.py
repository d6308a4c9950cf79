"""What Moat keeps of an execution's answer: its redacted output (and a failure's provider
details), sealed with the codec's keys, one row per receipt until its idempotency window
closes. A replay answers from here; the retention job deletes what has expired."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import CTE, delete, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql import bindparam

from schemas.execute import KeptOutput
from store.db import table_of
from store.keyrings.codec import OutputSealer
from store.models import ExecutionOutputRow, IdempotencyClaim

_OUTPUTS = table_of(ExecutionOutputRow)
_CLAIMS = table_of(IdempotencyClaim)


def _context(tenant_id: str, receipt_id: str) -> bytes:
    return f"moat-output|{tenant_id}|{receipt_id}".encode()


def _sealed(
    sealer: OutputSealer, tenant_id: str, receipt_id: str, kept: KeptOutput
) -> tuple[str, bytes]:
    """The output sealed for its receipt: (key id, sealed bytes)."""
    # Compact JSON with keys in the order the adapter gave them: served back as it is, so a
    # replay's output is the first answer's, byte for byte.
    plaintext = json.dumps(
        kept.model_dump(mode="json"), ensure_ascii=False, separators=(",", ":")
    ).encode()
    return sealer.seal(plaintext, _context(tenant_id, receipt_id))


def kept_with(new: CTE) -> CTE:
    """A receipt's output kept, until the execution's claim on its key expires, as a CTE of
    the statement that writes the receipt, so a replay finds both or neither: the output
    of the receipt ``new`` inserted (the CTE of an INSERT returning its ``id`` and
    ``tenant_id``), none when it inserted nothing. Its parameters: ``kept_params``."""
    claimed_until = (
        select(_CLAIMS.c.expires_at)
        .where(
            _CLAIMS.c.tenant_id == new.c.tenant_id,
            _CLAIMS.c.idempotency_key == bindparam("output_claimed_key"),
            _CLAIMS.c.receipt_id == new.c.id,
        )
        .scalar_subquery()
    )
    rows = select(
        new.c.id,
        new.c.tenant_id,
        bindparam("output_key_id", type_=_OUTPUTS.c.key_id.type),
        bindparam("output_sealed", type_=_OUTPUTS.c.sealed.type),
        func.coalesce(
            claimed_until, bindparam("output_expires_at", type_=_OUTPUTS.c.expires_at.type)
        ),
    ).select_from(new)
    columns = ["receipt_id", "tenant_id", "key_id", "sealed", "expires_at"]
    return (
        insert(_OUTPUTS)
        .from_select(columns, rows)
        .on_conflict_do_nothing(index_elements=[_OUTPUTS.c.receipt_id])
        .cte("kept_output")
    )


def kept_params(
    sealer: OutputSealer,
    tenant_id: str,
    receipt_id: str,
    kept: KeptOutput,
    expires_at: datetime,
    claimed_key: str,
) -> dict[str, Any]:
    """``kept_with``'s parameters: the output sealed for its receipt, the key its claim is
    on, and ``expires_at`` for when the execution holds no claim."""
    kid, sealed = _sealed(sealer, tenant_id, receipt_id, kept)
    return {
        "output_key_id": kid,
        "output_sealed": sealed,
        "output_claimed_key": claimed_key,
        "output_expires_at": expires_at,
    }


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
