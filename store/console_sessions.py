"""Console sessions (``/console``): a browser's signed-in session, made from an API key or a
person's OpenID Connect sign-in. Only the hash of the session's secret is kept; a session
is never deleted, only revoked (signing out is final).

Every function runs in a transaction already scoped to the session's tenant (row-level
security): a session id named with another tenant finds nothing."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from store.models import ConsoleSessionRow, PersonRow


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


async def insert(
    session: AsyncSession,
    *,
    session_id: str,
    tenant_id: str,
    secret: str,
    actor: str,
    key_id: str | None,
    scopes: Sequence[str],
    via: str,
    expires_at: datetime,
) -> ConsoleSessionRow:
    row = ConsoleSessionRow(
        id=session_id,
        tenant_id=tenant_id,
        secret_hash=hash_secret(secret),
        actor=actor,
        key_id=key_id,
        scopes=list(scopes),
        via=via,
        expires_at=expires_at,
    )
    session.add(row)
    await session.flush()
    return row


async def get(session: AsyncSession, tenant_id: str, session_id: str) -> ConsoleSessionRow | None:
    found = await session.execute(
        select(ConsoleSessionRow).where(
            ConsoleSessionRow.tenant_id == tenant_id, ConsoleSessionRow.id == session_id
        )
    )
    return found.scalar_one_or_none()


async def revoke(session: AsyncSession, tenant_id: str, session_id: str, now: datetime) -> None:
    """Revoke the session at ``now`` (kept when already revoked)."""
    await session.execute(
        update(ConsoleSessionRow)
        .where(
            ConsoleSessionRow.tenant_id == tenant_id,
            ConsoleSessionRow.id == session_id,
            ConsoleSessionRow.revoked_at.is_(None),
        )
        .values(revoked_at=now)
    )


async def person(session: AsyncSession, tenant_id: str, handle: str) -> PersonRow | None:
    return await session.get(PersonRow, (tenant_id, handle))
