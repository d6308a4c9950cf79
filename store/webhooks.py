"""Tenants' webhook subscriptions. A signing secret is generated here, handed back once,
and kept only sealed with the codec's keys (no raw secret at rest); a rotation keeps the
previous secret signing beside the new one for ``ROTATION_OVERLAP_HOURS``."""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from schemas.ids import uuid7
from schemas.webhooks import (
    ROTATION_OVERLAP_HOURS,
    WEBHOOK_SECRET_PREFIX,
    SubscriptionStatus,
    Webhook,
)
from store.keyrings.codec import OutputSealer
from store.models import WebhookSubscription
from store.pages import keyset

SECRET_BYTES = 32


def new_secret() -> str:
    return WEBHOOK_SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def _context(tenant_id: str, subscription_id: str) -> bytes:
    return f"webhook-secret|{tenant_id}|{subscription_id}".encode()


def to_webhook(row: WebhookSubscription) -> Webhook:
    return Webhook.model_validate(row, from_attributes=True)


async def create(
    session: AsyncSession,
    sealer: OutputSealer,
    *,
    tenant_id: str,
    url: str,
    events: list[str],
    max_retries: int,
    retry_base_seconds: float,
) -> tuple[WebhookSubscription, str]:
    """The new subscription and its secret (the only time it is seen in clear)."""
    sub_id = str(uuid7())
    secret = new_secret()
    kid, sealed = sealer.seal(secret.encode(), _context(tenant_id, sub_id))
    row = WebhookSubscription(
        id=sub_id,
        tenant_id=tenant_id,
        url=url,
        events=sorted(set(events)),
        status=SubscriptionStatus.ACTIVE.value,
        secret_kid=kid,
        secret_sealed=sealed,
        max_retries=max_retries,
        retry_base_seconds=retry_base_seconds,
    )
    session.add(row)
    await session.flush()
    await session.refresh(row)
    return row, secret


async def get(
    session: AsyncSession, tenant_id: str, subscription_id: str, *, lock: bool = False
) -> WebhookSubscription | None:
    row = await session.get(WebhookSubscription, subscription_id, with_for_update=lock)
    if row is None or row.tenant_id != tenant_id:
        return None
    return row


async def list_active(
    session: AsyncSession,
    tenant_id: str,
    after: tuple[Any, ...] | None = None,
    limit: int | None = None,
) -> list[WebhookSubscription]:
    """The subscriptions not removed, oldest first (after ``after``, at most ``limit``)."""
    stmt = select(WebhookSubscription).where(
        WebhookSubscription.tenant_id == tenant_id,
        WebhookSubscription.status != SubscriptionStatus.REMOVED.value,
    )
    columns = (WebhookSubscription.created_at, WebhookSubscription.id)
    stmt = keyset(stmt, columns, after, limit, newest_first=False)
    return list((await session.execute(stmt)).scalars().all())


async def rotate(
    session: AsyncSession, sealer: OutputSealer, row: WebhookSubscription, now: datetime
) -> str:
    """A new secret; the current one becomes the previous, signing for a day more."""
    secret = new_secret()
    row.previous_secret_kid = row.secret_kid
    row.previous_secret_sealed = row.secret_sealed
    row.previous_secret_expires_at = now + timedelta(hours=ROTATION_OVERLAP_HOURS)
    row.secret_kid, row.secret_sealed = sealer.seal(
        secret.encode(), _context(row.tenant_id, row.id)
    )
    row.updated_at = now
    await session.flush()
    return secret


@dataclass(frozen=True)
class SigningSecrets:
    current: str
    previous: str | None


def signing_secrets(
    sealer: OutputSealer, row: WebhookSubscription, now: datetime
) -> SigningSecrets:
    """The secrets that sign a delivery now: the current one, and the previous one while
    its overlap lasts."""
    context = _context(row.tenant_id, row.id)
    current = sealer.open(row.secret_kid, row.secret_sealed, context).decode()
    previous = None
    if (
        row.previous_secret_sealed is not None
        and row.previous_secret_kid is not None
        and row.previous_secret_expires_at is not None
        and row.previous_secret_expires_at > now
    ):
        previous = sealer.open(
            row.previous_secret_kid, row.previous_secret_sealed, context
        ).decode()
    return SigningSecrets(current, previous)


async def disable(
    session: AsyncSession, row: WebhookSubscription, reason: str, now: datetime
) -> None:
    row.status = SubscriptionStatus.DISABLED.value
    row.disabled_reason = reason
    row.updated_at = now
    await session.flush()


async def remove(session: AsyncSession, row: WebhookSubscription, now: datetime) -> None:
    """Kept (its deliveries stay readable) but no longer sent to or listed."""
    row.status = SubscriptionStatus.REMOVED.value
    row.updated_at = now
    await session.flush()
