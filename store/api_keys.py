"""API keys (``moat_<id>_<secret>``): issued, listed, revoked, and the authentication of a
presented key. The database keeps only the secret's hash, unreadable by the application role."""

from __future__ import annotations

import hashlib
import secrets
import string
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, text, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import defer

from schemas.api import ApiKeyInfo, NewApiKey
from schemas.scopes import DEFAULT_SCOPES
from store import db
from store.db import storable
from store.models import ApiKey
from store.pages import keyset

API_KEY_PREFIX = "moat"
_ID_ALPHABET = string.ascii_lowercase + string.digits


def _hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


# The application role may not read ``secret_hash``: queries it runs load keys without it.
_WITHOUT_HASH = defer(ApiKey.secret_hash, raiseload=True)


def key_prefix(key_id: str) -> str:
    """The public, non-secret start of a key: ``moat_<id>_``."""
    return f"{API_KEY_PREFIX}_{key_id}_"


def to_key_info(row: ApiKey) -> ApiKeyInfo:
    """A key as listed: id, public prefix, dates; never the secret or its hash."""
    return ApiKeyInfo(
        id=row.id,
        tenant_id=row.tenant_id,
        name=row.name,
        prefix=key_prefix(row.id),
        created_at=row.created_at,
        revoked_at=row.revoked_at,
        scopes=list(row.scopes),
    )


def to_new_key(row: ApiKey, secret: str) -> NewApiKey:
    """A key just issued: as listed, plus its secret (shown this once)."""
    return NewApiKey(**to_key_info(row).model_dump(), api_key=secret)


async def issue_api_key(
    session: AsyncSession,
    tenant_id: str,
    name: str = "",
    scopes: Sequence[str] = DEFAULT_SCOPES,
) -> tuple[ApiKey, str]:
    """Create a key; returns its row and the full key (``moat_<id>_<secret>``), which exists
    only here: the database keeps the secret's hash."""
    key_id = "".join(secrets.choice(_ID_ALPHABET) for _ in range(12))
    secret = secrets.token_urlsafe(32)
    row = ApiKey(
        id=key_id,
        tenant_id=tenant_id,
        secret_hash=_hash_secret(secret),
        name=name,
        scopes=list(scopes),
    )
    session.add(row)
    await session.flush()
    await session.refresh(row, ["created_at", "revoked_at"])
    return row, key_prefix(key_id) + secret


async def create_api_key(
    session: AsyncSession,
    tenant_id: str,
    name: str = "",
    scopes: Sequence[str] = DEFAULT_SCOPES,
) -> str:
    """Create a key and return it in full (``moat_<id>_<secret>``); only its hash is kept."""
    return (await issue_api_key(session, tenant_id, name, scopes))[1]


async def key_tenant(session: AsyncSession, key_id: str) -> str | None:
    """The tenant an API key id belongs to (revoked or not), before any tenant is set."""
    if not storable(key_id):
        return None
    result = await session.execute(text("SELECT moat_api_key_tenant(:key_id)"), {"key_id": key_id})
    tenant_id: str | None = result.scalar_one()
    return tenant_id


async def list_api_keys(
    session: AsyncSession,
    tenant_id: str,
    after: tuple[Any, ...] | None = None,
    limit: int | None = None,
) -> Sequence[ApiKey]:
    stmt = select(ApiKey).options(_WITHOUT_HASH).where(ApiKey.tenant_id == tenant_id)
    stmt = keyset(stmt, (ApiKey.created_at, ApiKey.id), after, limit, newest_first=False)
    return (await session.execute(stmt)).scalars().all()


async def revoke_api_key(session: AsyncSession, key_id: str, now: datetime) -> ApiKey | None:
    """Revoke a key at ``now`` (kept when already revoked); None if there is no such key."""
    await session.execute(
        update(ApiKey)
        .where(ApiKey.id == key_id, ApiKey.revoked_at.is_(None))
        .values(revoked_at=now)
    )
    return await session.get(ApiKey, key_id, populate_existing=True, options=[_WITHOUT_HASH])


async def is_revoked(session: AsyncSession, tenant_id: str, key_id: str) -> bool:
    """Whether the tenant's key ``key_id`` is revoked (a key that does not exist is)."""
    result = await session.execute(
        select(ApiKey.revoked_at).where(ApiKey.tenant_id == tenant_id, ApiKey.id == key_id)
    )
    found = result.first()
    return found is None or found[0] is not None


# Driver SQL (``db.pipelined``): a request's first statement, sent with its BEGIN.
_LOOKUP = (
    "SELECT tenant_id, revoked_at, policy_mode, idempotency_ttl_seconds, scopes"
    " FROM moat_lookup_api_key(%(key_id)s, %(secret_hash)s)"
)
# A revoked key names no tenant: set_config runs only for a live one.
SCOPED_LOOKUP = (
    "SELECT tenant_id, revoked_at, policy_mode, idempotency_ttl_seconds, scopes,"
    " CASE WHEN revoked_at IS NULL THEN set_config('moat.tenant_id', tenant_id, true) END"
    " FROM moat_lookup_api_key(%(key_id)s, %(secret_hash)s)"
)


@dataclass(frozen=True)
class AuthenticatedTenant:
    """Who is calling: a tenant, through one of its keys, with that key's scopes."""

    tenant_id: str
    key_id: str
    policy_mode: str
    idempotency_ttl_seconds: int
    scopes: tuple[str, ...] = DEFAULT_SCOPES


async def authenticate(
    session: AsyncSession, presented: str, *, scope: bool = False
) -> AuthenticatedTenant | None:
    """The tenant a presented API key belongs to, or None (unknown, malformed, revoked).

    Asked before any tenant is known, so through ``moat_lookup_api_key``, the database's
    one door to API keys across tenants (row-level security keeps the tables closed). The
    database compares the hashes: the stored one never leaves it.

    ``scope``: the same statement also names the key's tenant for the rest of the
    transaction (as ``tenancy.set_tenant`` does), when the key is valid: one round trip
    fewer on every request."""
    params = lookup_params(presented)
    if params is None:
        return None
    [row] = await db.pipelined(session, [(SCOPED_LOOKUP if scope else _LOOKUP, params)])
    return authenticated(row, params["key_id"])


def lookup_params(presented: str) -> dict[str, str] | None:
    """The parameters of ``SCOPED_LOOKUP`` for a presented key; None for one that cannot be
    a key (not Moat's form, or text Postgres cannot hold)."""
    parts = presented.split("_", 2)
    if len(parts) != 3 or parts[0] != API_KEY_PREFIX or not parts[1] or not parts[2]:
        return None
    if not storable(parts[1]) or not storable(parts[2]):
        return None
    return {"key_id": parts[1], "secret_hash": _hash_secret(parts[2])}


def authenticated(row: tuple[Any, ...] | None, key_id: str) -> AuthenticatedTenant | None:
    """The tenant a lookup's row names; None for no row or a revoked key."""
    if row is None:
        return None
    tenant_id, revoked_at, mode, ttl, scopes = row[:5]
    if revoked_at is not None:
        return None
    return AuthenticatedTenant(
        tenant_id=tenant_id,
        key_id=key_id,
        policy_mode=mode,
        idempotency_ttl_seconds=ttl,
        scopes=tuple(scopes),
    )
