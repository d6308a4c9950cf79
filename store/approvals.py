"""Approvals: requested by the policy step, decided once (approved, rejected or expired).

The caller's transaction also appends the event that records each change, so the approval's
state and its event are written together or not at all."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from cryptography.exceptions import InvalidTag
from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from schemas.approvals import Approval, ApprovalStatus
from store import held
from store.held import HeldReads
from store.keyrings.codec import OutputSealer
from store.models import ApprovalRow
from store.pages import keyset


async def request(session: AsyncSession, row: ApprovalRow) -> tuple[ApprovalRow, bool]:
    """Insert the request unless the execution already has one (a retried policy step or a
    reset run): the stored one, and whether it was inserted now."""
    values = {c.name: getattr(row, c.name) for c in ApprovalRow.__table__.columns}
    stmt = (
        insert(ApprovalRow)
        .values(**values)
        .on_conflict_do_nothing(index_elements=[ApprovalRow.receipt_id])
        .returning(ApprovalRow.id)
    )
    inserted = (await session.execute(stmt)).scalar_one_or_none() is not None
    stored = await by_receipt(session, row.tenant_id, row.receipt_id)
    assert stored is not None
    return stored, inserted


async def get(
    session: AsyncSession, tenant_id: str, approval_id: str, *, lock: bool = False
) -> ApprovalRow | None:
    stmt = select(ApprovalRow).where(
        ApprovalRow.tenant_id == tenant_id, ApprovalRow.id == approval_id
    )
    if lock:
        stmt = stmt.with_for_update()
    return (await session.execute(stmt)).scalar_one_or_none()


async def by_receipt(session: AsyncSession, tenant_id: str, receipt_id: str) -> ApprovalRow | None:
    stmt = select(ApprovalRow).where(
        ApprovalRow.tenant_id == tenant_id, ApprovalRow.receipt_id == receipt_id
    )
    return (await session.execute(stmt)).scalar_one_or_none()


async def pending_of_workflow(
    session: AsyncSession, tenant_id: str, workflow_id: str
) -> ApprovalRow | None:
    stmt = (
        select(ApprovalRow)
        .where(
            ApprovalRow.tenant_id == tenant_id,
            ApprovalRow.workflow_id == workflow_id,
            ApprovalRow.status == "pending",
        )
        .order_by(ApprovalRow.requested_at.desc())
        .limit(1)
    )
    return (await session.execute(stmt)).scalar_one_or_none()


# Whether ``pending_of_workflow`` finds one, as a held read (``store.held``): one statement.
_HELD_PENDING_OF_WORKFLOW = (
    f"SELECT {held.SCOPE}, EXISTS (SELECT 1 FROM approvals WHERE tenant_id = %(tenant)s"
    " AND workflow_id = %(workflow)s AND status = 'pending')"
)


async def pending_of_workflow_held(
    reads: HeldReads, tenant_id: str, workflow_id: str
) -> bool | None:
    """Whether the run ``workflow_id`` waits for an approval (``pending_of_workflow``),
    read in one statement on a connection held scoped to the tenant; None when not read
    there (no held connection free): read it in a transaction."""
    params = {"tenant": tenant_id, "workflow": workflow_id}
    row = await reads.read(tenant_id, _HELD_PENDING_OF_WORKFLOW, params)
    return None if row is None else bool(row[1])


async def listing(
    session: AsyncSession,
    tenant_id: str,
    status: str | None,
    limit: int,
    after: tuple[Any, ...] | None = None,
) -> Sequence[ApprovalRow]:
    stmt = select(ApprovalRow).where(ApprovalRow.tenant_id == tenant_id)
    if status is not None:
        stmt = stmt.where(ApprovalRow.status == status)
    columns = (ApprovalRow.requested_at, ApprovalRow.id)
    stmt = keyset(stmt, columns, after, limit, newest_first=True)
    return (await session.execute(stmt)).scalars().all()


async def decide(
    session: AsyncSession,
    row: ApprovalRow,
    status: str,
    *,
    decided_by: str,
    decided_at: datetime,
    comment: str | None,
    digest: str | None,
) -> ApprovalRow:
    """Move a pending approval (locked by ``get(lock=True)``) to its final status."""
    row.status = status
    row.decided_by = decided_by
    row.decided_at = decided_at
    row.comment = comment
    row.approved_digest = digest
    await session.flush()
    return row


def _context(row: ApprovalRow) -> bytes:
    return f"approval|{row.tenant_id}|{row.id}".encode()


def seal_input(sealer: OutputSealer, row: ApprovalRow, redacted: Any) -> None:
    """Seal the redacted input a person will be shown into ``row`` (bound to the row)."""
    row.input_key_id, row.input_sealed = sealer.seal(
        json.dumps(redacted, separators=(",", ":")).encode(), _context(row)
    )


def to_approval(row: ApprovalRow, sealer: OutputSealer | None = None) -> Approval:
    """The approval as the API shows it; with a sealer, with the redacted input."""
    shown: Any = None
    if sealer is not None:
        try:
            shown = json.loads(sealer.open(row.input_key_id, row.input_sealed, _context(row)))
        except (ValueError, InvalidTag):
            shown = None
    return Approval(
        id=row.id,
        status=ApprovalStatus(row.status),
        receipt_id=row.receipt_id,
        workflow_id=row.workflow_id,
        capability_id=row.capability_id,
        capability_version=row.capability_version,
        input_hash=row.input_hash,
        policy_version=row.policy_version,
        requested_by=row.requested_by,
        requested_at=row.requested_at,
        expires_at=row.expires_at,
        decided_by=row.decided_by,
        decided_at=row.decided_at,
        comment=row.comment,
        approved_digest=row.approved_digest,
        input=shown,
    )
