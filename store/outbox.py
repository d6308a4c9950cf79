"""The transactional outbox: an event for a tenant's webhooks is written in the caller's
transaction, beside the state change it announces, so both commit or neither does.

``enqueue`` writes one row per active subscription to the event type (none, when no one
listens); the relay (``starter.runtime.outbox_relay``) takes rows out through the
``moat_outbox_due`` function, and the delivery activity marks each attempt here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    ScalarSelect,
    any_,
    delete,
    func,
    literal,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from schemas.ids import uuid7
from schemas.redaction import redact
from schemas.webhooks import OutboxStatus, SubscriptionStatus, WebhookEventType
from store.db import table_of
from store.models import OutboxRow, WebhookDeliveryRow, WebhookSubscription
from store.pages import keyset

_SUBSCRIPTIONS = table_of(WebhookSubscription)


def subscribed_of(tenant_id: ColumnElement[str]) -> ScalarSelect[Any]:
    """``subscribed`` as an expression of another statement: the event types the active
    subscriptions of the tenant ``tenant_id`` names take, as an array (NULL: none)."""
    types = (
        select(func.unnest(_SUBSCRIPTIONS.c.events).label("event_type"))
        .where(
            _SUBSCRIPTIONS.c.tenant_id == tenant_id,
            _SUBSCRIPTIONS.c.status == SubscriptionStatus.ACTIVE.value,
        )
        .subquery()
    )
    return select(func.array_agg(types.c.event_type)).scalar_subquery()


async def subscribed(session: AsyncSession, tenant_id: str) -> frozenset[str]:
    """The event types the tenant's active subscriptions take (one query; lets a caller
    skip building an announcement nobody would receive)."""
    rows = await session.execute(
        select(func.unnest(WebhookSubscription.events)).where(
            WebhookSubscription.tenant_id == tenant_id,
            WebhookSubscription.status == SubscriptionStatus.ACTIVE.value,
        )
    )
    return frozenset(rows.scalars().all())


async def enqueue(
    session: AsyncSession,
    *,
    tenant_id: str,
    event_type: WebhookEventType,
    aggregate_id: str,
    data: dict[str, Any],
    event_id: str | None = None,
    occurred_at: datetime | None = None,
) -> int:
    """Announce ``event_type`` about ``aggregate_id`` to the tenant's subscribers, in the
    caller's transaction (only flushed). ``data`` is what the API returns for the aggregate
    (it is redacted again here: hashes, never raw input). A stable ``event_id`` makes the
    call idempotent per subscription; the events of one aggregate are delivered to each
    endpoint in the order they were enqueued. Returns how many rows were written."""
    subscribers = (
        (
            await session.execute(
                select(WebhookSubscription.id).where(
                    WebhookSubscription.tenant_id == tenant_id,
                    WebhookSubscription.status == SubscriptionStatus.ACTIVE.value,
                    literal(event_type.value) == any_(WebhookSubscription.events),
                )
            )
        )
        .scalars()
        .all()
    )
    if not subscribers:
        return 0
    event = event_id or str(uuid7())
    at = occurred_at if occurred_at is not None else await _now(session)
    payload = redact(data)
    stmt = (
        insert(OutboxRow)
        .values(
            [
                {
                    "id": str(uuid7()),
                    "tenant_id": tenant_id,
                    "subscription_id": sub,
                    "event_id": event,
                    "event_type": event_type.value,
                    "aggregate_id": aggregate_id,
                    "payload": payload,
                    "occurred_at": at,
                }
                for sub in sorted(subscribers)
            ]
        )
        .on_conflict_do_nothing(constraint="uq_outbox_subscription_event")
        .returning(OutboxRow.id)
    )
    return len((await session.execute(stmt)).all())


async def _now(session: AsyncSession) -> datetime:
    """The transaction's time: the moment the state change commits with, for every row."""
    stamp: datetime = (await session.execute(select(func.now()))).scalar_one()
    return stamp


@dataclass(frozen=True)
class Due:
    id: str
    tenant_id: str
    generation: int


async def claim_due(session: AsyncSession, limit: int, tenant_id: str | None = None) -> list[Due]:
    """Rows (of every tenant, or one) ready for a delivery workflow, locked until the
    caller's transaction ends (other relays skip them)."""
    rows = await session.execute(
        text("SELECT * FROM moat_outbox_due(:n, :tenant)"), {"n": limit, "tenant": tenant_id}
    )
    return [Due(r.id, r.tenant_id, r.generation) for r in rows]


async def mark_dispatched(session: AsyncSession, due: Sequence[Due]) -> None:
    if due:
        await session.execute(
            text("SELECT moat_outbox_dispatched(:ids, :gens)"),
            {"ids": [d.id for d in due], "gens": [d.generation for d in due]},
        )


async def get(session: AsyncSession, tenant_id: str, outbox_id: str) -> OutboxRow | None:
    row = await session.get(OutboxRow, outbox_id)
    return row if row is not None and row.tenant_id == tenant_id else None


async def lock(session: AsyncSession, tenant_id: str, outbox_id: str) -> OutboxRow | None:
    row = await session.get(OutboxRow, outbox_id, with_for_update=True)
    return row if row is not None and row.tenant_id == tenant_id else None


async def record_attempt(
    session: AsyncSession,
    row: OutboxRow,
    *,
    webhook_id: str,
    attempted_at: datetime,
    http_status: int | None,
    latency_ms: int,
    outcome: str,
    error: str | None,
) -> None:
    session.add(
        WebhookDeliveryRow(
            id=str(uuid7()),
            tenant_id=row.tenant_id,
            outbox_id=row.id,
            subscription_id=row.subscription_id,
            webhook_id=webhook_id,
            event_type=row.event_type,
            attempt=row.attempts + 1,
            attempted_at=attempted_at,
            http_status=http_status,
            latency_ms=latency_ms,
            outcome=outcome,
            error=error,
        )
    )
    await session.flush()


async def requeue(session: AsyncSession, row: OutboxRow) -> None:
    """Back to pending with its attempts reset, under a new generation (a new delivery
    workflow; the same ``webhook-id``)."""
    row.status = OutboxStatus.PENDING.value
    row.attempts = 0
    row.generation += 1
    row.next_attempt_at = None
    row.last_error = None
    await session.flush()


async def drop_pending(session: AsyncSession, tenant_id: str, subscription_id: str) -> None:
    """What a removed subscription was still to receive."""
    await session.execute(
        delete(OutboxRow).where(
            OutboxRow.tenant_id == tenant_id,
            OutboxRow.subscription_id == subscription_id,
            OutboxRow.status == OutboxStatus.PENDING.value,
        )
    )


async def deliveries(
    session: AsyncSession,
    tenant_id: str,
    subscription_id: str,
    limit: int,
    after: tuple[Any, ...] | None = None,
) -> list[WebhookDeliveryRow]:
    """A subscription's attempts, newest first (after ``after``)."""
    stmt = select(WebhookDeliveryRow).where(
        WebhookDeliveryRow.tenant_id == tenant_id,
        WebhookDeliveryRow.subscription_id == subscription_id,
    )
    columns = (WebhookDeliveryRow.attempted_at, WebhookDeliveryRow.id)
    stmt = keyset(stmt, columns, after, limit, newest_first=True)
    return list((await session.execute(stmt)).scalars().all())


async def set_status(session: AsyncSession, row: OutboxRow, **values: Any) -> None:
    await session.execute(update(OutboxRow).where(OutboxRow.id == row.id).values(**values))
