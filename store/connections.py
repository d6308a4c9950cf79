"""Connections: a tenant's credentials, stored sealed (``store.keyrings.connections``).

Every function takes the caller's session, scoped to the tenant (row-level security), and
only flushes. A secret is opened only by ``open_secret``, for the adapter activity."""

from __future__ import annotations

import secrets
import string
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from schemas.connections import ConnectionInfo
from store.db import storable
from store.keyrings.connections import (
    LEGACY_FINGERPRINT_PREFIX,
    ConnectionCipher,
    Sealed,
    context,
    last4,
)
from store.models import ConnectionRow
from store.pages import keyset

ID_PREFIX = "con_"
_ID_ALPHABET = string.ascii_lowercase + string.digits


def new_connection_id() -> str:
    return ID_PREFIX + "".join(secrets.choice(_ID_ALPHABET) for _ in range(20))


def to_info(row: ConnectionRow) -> ConnectionInfo:
    """A connection as answered: never its secret."""
    return ConnectionInfo(
        id=row.id,
        tenant_id=row.tenant_id,
        type=row.type,
        name=row.name,
        config=dict(row.config),
        fingerprint=row.fingerprint,
        last4=row.last4,
        key_id=row.key_id,
        created_at=row.created_at,
        rotated_at=row.rotated_at,
        revoked_at=row.revoked_at,
        needs_reauth_at=row.needs_reauth_at,
        needs_reauth_reason=row.needs_reauth_reason,
    )


def _sealed_columns(
    cipher: ConnectionCipher, row_ids: tuple[str, str], secret: str
) -> dict[str, Any]:
    sealed = cipher.seal(secret, context(*row_ids))
    return {
        "ciphertext": sealed.ciphertext,
        "nonce": sealed.nonce,
        "key_id": sealed.key_id,
        "fingerprint": cipher.fingerprint(secret, sealed.key_id),
        "last4": last4(secret),
    }


async def create_connection(
    session: AsyncSession,
    cipher: ConnectionCipher,
    *,
    tenant_id: str,
    type: str,
    name: str,
    secret: str,
    config: dict[str, Any],
) -> ConnectionRow:
    connection_id = new_connection_id()
    row = ConnectionRow(
        id=connection_id,
        tenant_id=tenant_id,
        type=type,
        name=name,
        config=config,
        **_sealed_columns(cipher, (tenant_id, connection_id), secret),
    )
    session.add(row)
    await session.flush()
    await session.refresh(row, ["created_at", "rotated_at", "revoked_at"])
    return row


async def get_connection(
    session: AsyncSession, tenant_id: str, connection_id: str
) -> ConnectionRow | None:
    """The tenant's connection with this id (None: absent, another tenant's, or not an id)."""
    if not storable(connection_id) or not connection_id.startswith(ID_PREFIX):
        return None
    result = await session.execute(
        select(ConnectionRow).where(
            ConnectionRow.tenant_id == tenant_id, ConnectionRow.id == connection_id
        )
    )
    return result.scalar_one_or_none()


async def list_connections(
    session: AsyncSession,
    tenant_id: str,
    after: tuple[Any, ...] | None = None,
    limit: int | None = None,
) -> Sequence[ConnectionRow]:
    stmt = select(ConnectionRow).where(ConnectionRow.tenant_id == tenant_id)
    columns = (ConnectionRow.created_at, ConnectionRow.id)
    stmt = keyset(stmt, columns, after, limit, newest_first=False)
    return (await session.execute(stmt)).scalars().all()


async def rotate_connection(
    session: AsyncSession, cipher: ConnectionCipher, row: ConnectionRow, secret: str, now: datetime
) -> ConnectionRow:
    """Seal a new secret in place of the old one (a live connection only)."""
    await session.execute(
        update(ConnectionRow)
        .where(ConnectionRow.id == row.id, ConnectionRow.revoked_at.is_(None))
        .values(rotated_at=now, **_sealed_columns(cipher, (row.tenant_id, row.id), secret))
    )
    await session.refresh(row)
    return row


async def revoke_connection(
    session: AsyncSession, row: ConnectionRow, now: datetime
) -> ConnectionRow:
    """Revoke at ``now`` (kept when already revoked). The sealed secret is wiped: a revoked
    connection is kept for the record (name, fingerprint, dates) and never used again."""
    await session.execute(
        update(ConnectionRow)
        .where(ConnectionRow.id == row.id, ConnectionRow.revoked_at.is_(None))
        .values(revoked_at=now, ciphertext=b"", nonce=b"")
    )
    await session.refresh(row)
    return row


async def reencrypt_connections(
    session: AsyncSession, cipher: ConnectionCipher, tenant_id: str
) -> int:
    """Re-seal the tenant's live connections that an older key sealed under the active
    one, their fingerprints keyed anew (and a legacy unkeyed one replaced); how many were."""
    result = await session.execute(
        select(ConnectionRow).where(
            ConnectionRow.tenant_id == tenant_id,
            ConnectionRow.revoked_at.is_(None),
            (ConnectionRow.key_id != cipher.active_key_id)
            | ConnectionRow.fingerprint.startswith(LEGACY_FINGERPRINT_PREFIX),
        )
    )
    rows = result.scalars().all()
    for row in rows:
        secret = open_secret(cipher, row)
        sealed = cipher.seal(secret, context(row.tenant_id, row.id))
        await session.execute(
            update(ConnectionRow)
            .where(ConnectionRow.id == row.id, ConnectionRow.key_id == row.key_id)
            .values(
                ciphertext=sealed.ciphertext,
                nonce=sealed.nonce,
                key_id=sealed.key_id,
                fingerprint=cipher.fingerprint(secret, sealed.key_id),
            )
        )
    return len(rows)


async def rekey_legacy_fingerprint(
    session: AsyncSession, cipher: ConnectionCipher, row: ConnectionRow, secret: str
) -> None:
    """Replace a live row's unkeyed fingerprint (from before fingerprints were keyed) with
    its keyed one, now that its secret is open. Migrations cannot do it: they run without
    the keyring."""
    if not row.fingerprint.startswith(LEGACY_FINGERPRINT_PREFIX) or row.revoked_at is not None:
        return
    await session.execute(
        update(ConnectionRow)
        .where(ConnectionRow.id == row.id, ConnectionRow.fingerprint == row.fingerprint)
        .values(fingerprint=cipher.fingerprint(secret, row.key_id))
    )


def open_secret(cipher: ConnectionCipher, row: ConnectionRow) -> str:
    return cipher.open(
        Sealed(row.key_id, row.nonce, row.ciphertext), context(row.tenant_id, row.id)
    )
