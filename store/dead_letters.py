"""One list of what needs a person: deliveries out of attempts and executions whose effect
dead-lettered, each written in the transaction that gave up on it; and the
compensating-action record of a dead-lettered execution (what was attempted, what is
known of the effect, what operators did)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from schemas.webhooks import (
    CompensatingAction,
    DeadLetter,
    DeadLetterKind,
    DeadLetterStatus,
    compensating_action_id,
    delivery_dead_letter_id,
    execution_dead_letter_id,
)
from store.models import CompensatingActionRow, DeadLetterRow, OutboxRow
from store.pages import keyset


def to_dead_letter(row: DeadLetterRow) -> DeadLetter:
    out = DeadLetter.model_validate(row, from_attributes=True)
    if row.kind == DeadLetterKind.EXECUTION.value:
        out.compensating_action_id = compensating_action_id(row.subject_id)
    return out


def to_compensating_action(row: CompensatingActionRow) -> CompensatingAction:
    return CompensatingAction.model_validate(row, from_attributes=True)


async def record_delivery(
    session: AsyncSession, row: OutboxRow, reason: str, error_code: str
) -> str:
    """A delivery that ran out of attempts (or whose endpoint is gone); once per requeue."""
    dl_id = delivery_dead_letter_id(row.id, row.generation)
    await session.execute(
        insert(DeadLetterRow)
        .values(
            id=dl_id,
            tenant_id=row.tenant_id,
            kind=DeadLetterKind.DELIVERY.value,
            subject_id=row.id,
            reason=reason,
            error_code=error_code,
        )
        .on_conflict_do_nothing(index_elements=[DeadLetterRow.id])
    )
    return dl_id


async def record_execution(
    session: AsyncSession,
    *,
    tenant_id: str,
    receipt_id: str,
    reason: str,
    error_code: str | None,
    attempted: dict[str, Any],
) -> bool:
    """An execution whose effect dead-lettered, and its compensating-action record; False
    when already recorded."""
    dl_id = execution_dead_letter_id(receipt_id)
    written = (
        await session.execute(
            insert(DeadLetterRow)
            .values(
                id=dl_id,
                tenant_id=tenant_id,
                kind=DeadLetterKind.EXECUTION.value,
                subject_id=receipt_id,
                reason=reason,
                error_code=error_code,
            )
            .on_conflict_do_nothing(index_elements=[DeadLetterRow.id])
            .returning(DeadLetterRow.id)
        )
    ).scalar_one_or_none()
    if written is None:
        return False
    session.add(
        CompensatingActionRow(
            id=compensating_action_id(receipt_id),
            tenant_id=tenant_id,
            receipt_id=receipt_id,
            dead_letter_id=dl_id,
            attempted=attempted,
            effect="unknown",
            operator_actions=[],
        )
    )
    await session.flush()
    return True


async def list_dead_letters(
    session: AsyncSession,
    tenant_id: str,
    status: DeadLetterStatus | None,
    limit: int,
    after: tuple[Any, ...] | None = None,
) -> list[DeadLetterRow]:
    stmt = select(DeadLetterRow).where(DeadLetterRow.tenant_id == tenant_id)
    if status is not None:
        stmt = stmt.where(DeadLetterRow.status == status.value)
    columns = (DeadLetterRow.created_at, DeadLetterRow.id)
    stmt = keyset(stmt, columns, after, limit, newest_first=True)
    return list((await session.execute(stmt)).scalars().all())


async def get(
    session: AsyncSession, tenant_id: str, dl_id: str, *, lock: bool = False
) -> DeadLetterRow | None:
    row = await session.get(DeadLetterRow, dl_id, with_for_update=lock)
    return row if row is not None and row.tenant_id == tenant_id else None


async def close(
    session: AsyncSession,
    row: DeadLetterRow,
    status: DeadLetterStatus,
    *,
    by: str,
    note: str,
    now: datetime,
    requeued_as: str | None = None,
) -> None:
    row.status = status.value
    row.closed_at = now
    row.closed_by = by
    row.note = note or None
    row.requeued_as = requeued_as
    await session.flush()


async def get_compensating_action(
    session: AsyncSession, tenant_id: str, ca_id: str, *, lock: bool = False
) -> CompensatingActionRow | None:
    row = await session.get(CompensatingActionRow, ca_id, with_for_update=lock)
    return row if row is not None and row.tenant_id == tenant_id else None


async def note_operator_action(
    session: AsyncSession,
    row: CompensatingActionRow,
    action: dict[str, Any],
    now: datetime,
    effect: str | None = None,
) -> None:
    row.operator_actions = [*row.operator_actions, action]
    if effect is not None:
        row.effect = effect
    row.updated_at = now
    await session.flush()
