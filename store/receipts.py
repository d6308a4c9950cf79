"""Receipts (write-once, one per execution attempt) and their outcome events."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import bindparam, func, select, tuple_
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from schemas.records import OutcomeEvent, Receipt
from store import budgets, db, outbox, outputs, tenancy, translog
from store.db import DriverStatement, table_of
from store.models import OutcomeEventRow, ReceiptRow


def to_receipt(row: ReceiptRow) -> Receipt:
    return Receipt.model_validate(row, from_attributes=True)


_RECEIPTS = table_of(ReceiptRow)
# Every execution runs these: built once, executed with fresh parameters only.
_INSERT_RECEIPT = (
    insert(_RECEIPTS)
    .on_conflict_do_nothing(index_elements=[_RECEIPTS.c.id])
    .returning(_RECEIPTS.c.id)
)
_GET_RECEIPT = select(*_RECEIPTS.c).where(
    _RECEIPTS.c.id == bindparam("receipt_id"), _RECEIPTS.c.tenant_id == bindparam("tenant_id")
)
_OUTCOMES = table_of(OutcomeEventRow)
_INSERT_OUTCOME = insert(_OUTCOMES)


def _insert_with_outcome(*, leaf: bool = True, output: bool = False) -> Any:
    """The receipt, and only when it is new, its outcome event, its transparency-log leaf,
    its budget's use and hold (``budgets.used_with``, ``budgets.released_with``) and with
    ``output`` its kept answer (``outputs.kept_with``): one statement (each is selected
    from the receipt's insert), which returns, with a new receipt only, the event types
    the tenant's webhooks take (``outbox.subscribed_of``). ``leaf`` False: the statement
    without the leaf, for ``bench.translog`` to measure what the leaf costs."""
    receipt_columns = [c for c in _RECEIPTS.c if c.name in Receipt.model_fields]
    outcome_columns = [c for c in _OUTCOMES.c if c.name in OutcomeEvent.model_fields]
    new_receipt = (
        insert(_RECEIPTS)
        .values({c.name: bindparam(f"r_{c.name}", type_=c.type) for c in receipt_columns})
        .on_conflict_do_nothing(index_elements=[_RECEIPTS.c.id])
        .returning(_RECEIPTS.c.id, _RECEIPTS.c.tenant_id, _RECEIPTS.c.capability_id)
        .cte("new_receipt")
    )
    outcome = select(*(bindparam(f"o_{c.name}", type_=c.type) for c in outcome_columns))
    with_it = [new_receipt, budgets.used_with(new_receipt), budgets.released_with(new_receipt)]
    if leaf:
        with_it.append(translog.appended_with(new_receipt, "receipt"))
    if output:
        with_it.append(outputs.kept_with(new_receipt))
    return (
        insert(_OUTCOMES)
        .from_select([c.name for c in outcome_columns], outcome.select_from(new_receipt))
        .add_cte(*with_it)
        .returning(
            _OUTCOMES.c.receipt_id,
            outbox.subscribed_of(bindparam("r_tenant_id", type_=_RECEIPTS.c.tenant_id.type)),
        )
    )


_INSERT_WITH_OUTCOME = DriverStatement(_insert_with_outcome())
_INSERT_WITH_OUTPUT = DriverStatement(_insert_with_outcome(output=True))


def _values(receipt: Receipt) -> dict[str, Any]:
    """The receipt's row values."""
    values = receipt.model_dump(mode="python")
    if receipt.provider_evidence is not None:  # jsonb: its times as JSON text
        values["provider_evidence"] = receipt.provider_evidence.model_dump(mode="json")
    return values


async def insert_receipt(session: AsyncSession, receipt: Receipt) -> bool:
    """Insert a receipt; False when one with this id already exists (a retried step)."""
    inserted = await session.execute(_INSERT_RECEIPT, _values(receipt))
    return inserted.scalar_one_or_none() is not None


async def get_receipt(session: AsyncSession, tenant_id: str, receipt_id: str) -> Receipt | None:
    params = {"receipt_id": receipt_id, "tenant_id": tenant_id}
    row = (await session.execute(_GET_RECEIPT, params)).mappings().first()
    return Receipt.model_validate(row) if row is not None else None


@dataclass(frozen=True)
class ReceiptFilter:
    capability_id: str | None = None
    status: str | None = None
    idempotency_key: str | None = None
    since: datetime | None = None
    until: datetime | None = None


async def list_receipts(
    session: AsyncSession,
    tenant_id: str,
    where: ReceiptFilter,
    *,
    limit: int,
    after: tuple[datetime, str] | None = None,
) -> list[Receipt]:
    """Receipts newest first (``timestamp``, then id), from just after ``after`` on.

    ``since`` is inclusive, ``until`` exclusive. Asks for ``limit`` rows; a caller that
    wants to know whether more follow asks for one more."""
    stmt = select(ReceiptRow).where(ReceiptRow.tenant_id == tenant_id)
    if where.capability_id is not None:
        stmt = stmt.where(ReceiptRow.capability_id == where.capability_id)
    if where.status is not None:
        stmt = stmt.where(ReceiptRow.status == where.status)
    if where.idempotency_key is not None:
        stmt = stmt.where(ReceiptRow.idempotency_key == where.idempotency_key)
    if where.since is not None:
        stmt = stmt.where(ReceiptRow.timestamp >= where.since)
    if where.until is not None:
        stmt = stmt.where(ReceiptRow.timestamp < where.until)
    if after is not None:
        stmt = stmt.where(tuple_(ReceiptRow.timestamp, ReceiptRow.id) < tuple_(*after))
    stmt = stmt.order_by(ReceiptRow.timestamp.desc(), ReceiptRow.id.desc()).limit(limit)
    return [to_receipt(row) for row in (await session.execute(stmt)).scalars()]


async def insert_with_outcome(
    session: AsyncSession,
    receipt: Receipt,
    outcome: OutcomeEvent,
    output: dict[str, Any] | None = None,
    budget: dict[str, Any] | None = None,
    *,
    scope: bool = False,
) -> frozenset[str] | None:
    """``insert_receipt``, and with a new receipt its outcome event, its leaf in the
    tenant's transparency log (``translog.append_receipt``), its budget's use and hold
    (``budget``: ``budgets.use_params``; None: neither) and the answer kept for replays
    (``output``: ``outputs.kept_params``; None: none), in one statement. ``scope``: the
    statement opens the transaction, scoped to the receipt's tenant in the same round trip.

    None when the receipt was there already (nothing written); else the event types the
    tenant's webhooks take, read by the same statement (for ``announcements.announce``)."""
    values = {f"r_{k}": v for k, v in _values(receipt).items()}
    values["leaf_digest"] = translog.receipt_digest(receipt)
    values.update(output or {})
    values.update(budget or budgets.use_params(use=False, release=False, now=receipt.timestamp))
    values.update({f"o_{k}": v for k, v in outcome.model_dump(mode="python").items()})
    statement = _INSERT_WITH_OUTCOME if output is None else _INSERT_WITH_OUTPUT
    sent = [(statement.sql, statement.params(values))]
    if scope:
        sent.insert(0, (tenancy.SET_TENANT, {"tenant": receipt.tenant_id}))
    inserted = (await db.pipelined(session, sent))[-1]
    if inserted is None:
        return None
    return frozenset(inserted[1] or ())


async def insert_outcome_event(session: AsyncSession, event: OutcomeEvent) -> None:
    await session.execute(_INSERT_OUTCOME, event.model_dump(mode="python"))


async def ensure_outcome_partitions(session: AsyncSession, now: datetime, months: int = 3) -> None:
    """Create the monthly partitions of ``outcome_events`` from ``now``'s month on, ``months``
    of them, where missing (a SECURITY DEFINER function: the app role owns no table)."""
    await session.execute(select(func.moat_ensure_outcome_partitions(now, months)))


def months_from(start: datetime, months: int) -> list[str]:
    """``YYYY-MM`` of ``months`` months from ``start``'s (UTC) on."""
    utc = start.astimezone(UTC)
    index = utc.year * 12 + utc.month - 1
    return [f"{(index + i) // 12:04d}-{(index + i) % 12 + 1:02d}" for i in range(months)]
