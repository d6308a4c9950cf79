"""Console sessions: a browser signed in to ``/console``, for the gateway's console pages.

A session is opened from an API key (its actor ``key:<id>``, its scopes the key's) or for
a person who signed in with OpenID Connect (``person:<handle>``, the scopes the tenant gave
them). The browser holds ``<tenant id>.<session id>.<secret>`` (the cookie's value): the
tenant names the row-level-security scope the row is read under, the secret proves the
holder, and only the secret's hash is stored. A session is dead once signed out, past its
expiry, when the key it came from is revoked or the person it names is disabled; a dead
session never comes back.

The token that guards the session's forms against cross-site requests (CSRF) is derived
from the session's secret: it is never stored, and nobody without the cookie can make it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from schemas.approvals import KEY_ACTOR_PREFIX, PERSON_ACTOR_PREFIX, key_actor, person_actor
from starter.service import tenants
from store import api_keys, console_sessions, tenancy
from store.db import storable

SESSION_ID_PREFIX = "cs_"
VIA_KEY = "key"
VIA_OIDC = "oidc"
_CSRF_CONTEXT = b"moat console csrf v1"


class Ended(StrEnum):
    """Why a session no longer signs anyone in (the sign-in page says it in words)."""

    NONE = "none"  # no session at all
    SIGNED_OUT = "signed_out"
    EXPIRED = "expired"
    KEY_REVOKED = "key_revoked"
    PERSON_DISABLED = "person_disabled"
    UNKNOWN = "unknown"  # a cookie that names no session (forged, or of another database)


@dataclass(frozen=True)
class Principal:
    """Who a live console session signs in: the tenant, the actor approvals name
    (``key:<id>`` or ``person:<handle>``), its scopes, and the session's CSRF token."""

    tenant_id: str
    actor: str
    scopes: tuple[str, ...]
    session_id: str
    via: str
    key_id: str | None
    expires_at: datetime
    csrf_token: str


@dataclass(frozen=True)
class Opened:
    """A session just opened: the cookie's value (its secret exists only here) and whom it
    signs in."""

    cookie: str
    principal: Principal


def csrf_token(secret: str) -> str:
    """The session's form token: an HMAC of its secret, so it needs no storage."""
    return hmac.new(secret.encode(), _CSRF_CONTEXT, hashlib.sha256).hexdigest()


def same_token(presented: str | None, expected: str) -> bool:
    """Constant-time comparison of a presented token with the expected one."""
    if not presented:
        return False
    return hmac.compare_digest(
        hashlib.sha256(presented.encode()).digest(), hashlib.sha256(expected.encode()).digest()
    )


async def open_for_key(
    sessions: async_sessionmaker[AsyncSession],
    presented_key: str,
    lifetime_seconds: float,
    now: datetime | None = None,
) -> Opened:
    """A session for the holder of ``presented_key``, authenticated as the gateway
    authenticates a key (401 ``unauthenticated`` when it is unknown, malformed or
    revoked): actor ``key:<id>``, the key's scopes."""
    async with sessions.begin() as session:
        caller = await api_keys.authenticate(session, presented_key.strip(), scope=True)
        if caller is None:
            raise tenants.unknown_key(presented_key.strip())
        return await _open(
            session,
            tenant_id=caller.tenant_id,
            actor=key_actor(caller.key_id),
            key_id=caller.key_id,
            scopes=caller.scopes,
            via=VIA_KEY,
            expires_at=(now or datetime.now(UTC)) + timedelta(seconds=lifetime_seconds),
        )


async def open_for_person(
    sessions: async_sessionmaker[AsyncSession],
    *,
    tenant_id: str,
    handle: str,
    scopes: Sequence[str],
    lifetime_seconds: float,
    via: str = VIA_OIDC,
    now: datetime | None = None,
) -> Opened:
    """A session for the tenant's person ``handle`` (``person:<handle>``), who signed in
    another way (OpenID Connect: the caller has mapped them to the tenant and scopes)."""
    async with tenancy.tenant_transaction(sessions, tenant_id) as session:
        return await _open(
            session,
            tenant_id=tenant_id,
            actor=person_actor(handle),
            key_id=None,
            scopes=tuple(scopes),
            via=via,
            expires_at=(now or datetime.now(UTC)) + timedelta(seconds=lifetime_seconds),
        )


async def _open(
    session: AsyncSession,
    *,
    tenant_id: str,
    actor: str,
    key_id: str | None,
    scopes: Sequence[str],
    via: str,
    expires_at: datetime,
) -> Opened:
    session_id = SESSION_ID_PREFIX + secrets.token_hex(16)
    secret = secrets.token_urlsafe(32)
    await console_sessions.insert(
        session,
        session_id=session_id,
        tenant_id=tenant_id,
        secret=secret,
        actor=actor,
        key_id=key_id,
        scopes=scopes,
        via=via,
        expires_at=expires_at,
    )
    principal = Principal(
        tenant_id=tenant_id,
        actor=actor,
        scopes=tuple(scopes),
        session_id=session_id,
        via=via,
        key_id=key_id,
        expires_at=expires_at,
        csrf_token=csrf_token(secret),
    )
    return Opened(cookie=f"{tenant_id}.{session_id}.{secret}", principal=principal)


def _parts(cookie: str | None) -> tuple[str, str, str] | None:
    if not cookie or len(cookie) > 400:
        return None
    parts = cookie.split(".")
    if len(parts) != 3 or not all(parts) or not all(storable(p) for p in parts):
        return None
    return parts[0], parts[1], parts[2]


async def resolve(
    sessions: async_sessionmaker[AsyncSession], cookie: str | None, now: datetime | None = None
) -> Principal | Ended:
    """Whom the cookie's session signs in, or why it signs in no one."""
    parts = _parts(cookie)
    if parts is None:
        return Ended.NONE if not cookie else Ended.UNKNOWN
    tenant_id, session_id, secret = parts
    async with tenancy.tenant_transaction(sessions, tenant_id) as session:
        row = await console_sessions.get(session, tenant_id, session_id)
        if row is None or not same_token(console_sessions.hash_secret(secret), row.secret_hash):
            return Ended.UNKNOWN
        if row.revoked_at is not None:
            return Ended.SIGNED_OUT
        if (now or datetime.now(UTC)) >= row.expires_at:
            return Ended.EXPIRED
        ended = await _holder_gone(session, tenant_id, row.actor)
        if ended is not None:
            return ended
    return Principal(
        tenant_id=tenant_id,
        actor=row.actor,
        scopes=tuple(row.scopes),
        session_id=row.id,
        via=row.via,
        key_id=row.key_id,
        expires_at=row.expires_at,
        csrf_token=csrf_token(secret),
    )


async def _holder_gone(session: AsyncSession, tenant_id: str, actor: str) -> Ended | None:
    """Why the key or person the session signs in may no longer act, if so."""
    if actor.startswith(KEY_ACTOR_PREFIX):
        key_id = actor.removeprefix(KEY_ACTOR_PREFIX)
        return Ended.KEY_REVOKED if await api_keys.is_revoked(session, tenant_id, key_id) else None
    if actor.startswith(PERSON_ACTOR_PREFIX):
        person = await console_sessions.person(
            session, tenant_id, actor.removeprefix(PERSON_ACTOR_PREFIX)
        )
        return Ended.PERSON_DISABLED if person is None or person.disabled_at else None
    return Ended.UNKNOWN


async def revoke(
    sessions: async_sessionmaker[AsyncSession], cookie: str | None, now: datetime | None = None
) -> None:
    """Sign the cookie's session out for good (nothing when it names no session)."""
    parts = _parts(cookie)
    if parts is None:
        return
    tenant_id, session_id, secret = parts
    async with tenancy.tenant_transaction(sessions, tenant_id) as session:
        row = await console_sessions.get(session, tenant_id, session_id)
        if row is not None and same_token(console_sessions.hash_secret(secret), row.secret_hash):
            await console_sessions.revoke(session, tenant_id, session_id, now or datetime.now(UTC))
