"""A tenant's approvals channel (``approval_channels``): where its new approvals are
posted, the key whose authority the announcements carry, and the Slack app's signing
secret, kept only sealed with the codec's keys (bound to the tenant), like a webhook's."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import delete
from sqlalchemy.ext.asyncio import AsyncSession

from schemas.slack_approvals import CHANNEL_KIND_SLACK
from store.keyrings.codec import OutputSealer
from store.models import ApprovalChannelRow


def _context(tenant_id: str) -> bytes:
    return f"approval-channel-secret|{tenant_id}".encode()


async def get(session: AsyncSession, tenant_id: str) -> ApprovalChannelRow | None:
    row = await session.get(ApprovalChannelRow, tenant_id)
    return row if row is not None and row.tenant_id == tenant_id else None


async def put(
    session: AsyncSession,
    sealer: OutputSealer,
    *,
    tenant_id: str,
    connection_id: str,
    channel: str,
    signing_secret: str,
    api_key_id: str,
    scopes: Sequence[str],
    created_by: str,
    now: datetime,
) -> ApprovalChannelRow:
    """Set (or replace) the tenant's channel; only flushed."""
    kid, sealed = sealer.seal(signing_secret.encode(), _context(tenant_id))
    row = await get(session, tenant_id)
    if row is None:
        row = ApprovalChannelRow(tenant_id=tenant_id, created_at=now)
        session.add(row)
    row.kind = CHANNEL_KIND_SLACK
    row.connection_id = connection_id
    row.channel = channel
    row.signing_secret_kid, row.signing_secret_sealed = kid, sealed
    row.api_key_id = api_key_id
    row.scopes = list(scopes)
    row.created_by = created_by
    row.updated_at = now
    await session.flush()
    return row


async def clear(session: AsyncSession, tenant_id: str) -> bool:
    result = await session.execute(
        delete(ApprovalChannelRow).where(ApprovalChannelRow.tenant_id == tenant_id)
    )
    return bool(getattr(result, "rowcount", 0))


def signing_secret(sealer: OutputSealer, row: ApprovalChannelRow) -> bytes:
    """The Slack app's signing secret, unsealed (it never leaves the process)."""
    return sealer.open(row.signing_secret_kid, row.signing_secret_sealed, _context(row.tenant_id))
