"""A connection's short-lived access token, refreshed once across every process.

OAuth 2 access tokens expire within hours and their refresh tokens rotate on every use; a
GitHub App's installation token lives an hour. Two workers refreshing the same token at
once invalidate each other (a rotated refresh token used twice revokes the whole grant), so
a refresh is single-flight across workers and gateways:

- a token still fresh (``expires_at`` more than ``skew`` ahead) is read without a lock;
- otherwise the caller locks the connection's ``connection_tokens`` row
  (``SELECT … FOR UPDATE``), reads it again (another process may have refreshed it while
  this one waited: then that result is the answer), and only then asks the provider, with
  the lock held, and writes the new pair in the same transaction. Every other caller waits
  for that commit and reads what it wrote: one refresh, and a rotated refresh token is
  never presented twice;
- a refusal for good (``Refused``, e.g. OAuth's ``invalid_grant``) marks the connection
  ``needs_reauth`` in that same transaction, so the calls that follow are refused at once,
  and announces it to the tenant's webhooks (``connection.needs_reauth``, same transaction).

Both tokens are sealed with the connection keyring, under an associated data that names
the tenant, the connection and which token it is: a ciphertext moved to another row or
column does not open. A process that dies after the provider answered and before the commit
loses that answer; the next refresh then presents the old refresh token (a provider with
reuse detection refuses it, and the connection asks for a person: never a silent reuse).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from schemas.webhooks import WebhookEventType
from store import outbox, tenancy
from store.keyrings.connections import ConnectionCipher, Sealed, context
from store.models import ConnectionRow, ConnectionTokenRow

# How long before its expiry a token counts as stale: a call started with it still has time
# to reach the provider.
DEFAULT_SKEW = timedelta(seconds=60)
MAX_REASON = 200


@dataclass(frozen=True)
class TokenState:
    """The connection's current pair as stored (``generation`` 0: none minted yet)."""

    access_token: str | None
    refresh_token: str | None
    expires_at: datetime | None
    generation: int

    def fresh(self, now: datetime, skew: timedelta = DEFAULT_SKEW) -> bool:
        if self.access_token is None:
            return False
        return self.expires_at is None or self.expires_at - skew > now


@dataclass(frozen=True)
class Minted:
    """What the provider gave: a new access token, its expiry, and a new refresh token
    (``None`` keeps the stored one: a provider that does not rotate)."""

    access_token: str
    expires_at: datetime | None
    refresh_token: str | None = None


class Refused(Exception):
    """The provider refused the grant for good (OAuth's ``invalid_grant``, an uninstalled
    GitHub App): the connection needs a person to connect it again. ``reason`` is Moat's
    own words (it is stored and shown), never the provider's text."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason[:MAX_REASON]


class NeedsReauth(Exception):
    """The connection is marked ``needs_reauth``: no call may use it until it is connected
    again."""

    def __init__(self, connection_id: str, reason: str) -> None:
        super().__init__(f"connection {connection_id} needs to be connected again: {reason}")
        self.connection_id = connection_id
        self.reason = reason


Mint = Callable[[TokenState], Awaitable[Minted]]


def _ctx(tenant_id: str, connection_id: str, which: str) -> bytes:
    return context(tenant_id, connection_id) + f"\n{which} token".encode()


def _state(cipher: ConnectionCipher, row: ConnectionTokenRow | None) -> TokenState:
    if row is None:
        return TokenState(None, None, None, 0)

    def opened(which: str, nonce: bytes | None, ciphertext: bytes | None) -> str | None:
        if nonce is None or ciphertext is None or row.key_id is None:
            return None
        sealed = Sealed(row.key_id, nonce, ciphertext)
        return cipher.open(sealed, _ctx(row.tenant_id, row.connection_id, which))

    return TokenState(
        access_token=opened("access", row.access_nonce, row.access_ciphertext),
        refresh_token=opened("refresh", row.refresh_nonce, row.refresh_ciphertext),
        expires_at=row.expires_at,
        generation=row.generation,
    )


async def _read(
    session: AsyncSession, tenant_id: str, connection_id: str, *, lock: bool
) -> ConnectionTokenRow | None:
    query = select(ConnectionTokenRow).where(
        ConnectionTokenRow.tenant_id == tenant_id,
        ConnectionTokenRow.connection_id == connection_id,
    )
    if lock:
        query = query.with_for_update()
    return (await session.execute(query)).scalar_one_or_none()


async def _needs_reauth(session: AsyncSession, connection_id: str) -> str | None:
    row = await session.get(ConnectionRow, connection_id)
    if row is None or row.needs_reauth_at is None:
        return None
    return row.needs_reauth_reason or "the provider refused the grant"


async def store(
    session: AsyncSession,
    cipher: ConnectionCipher,
    tenant_id: str,
    connection_id: str,
    minted: Minted,
    now: datetime | None = None,
) -> TokenState:
    """Write ``minted`` as the connection's pair (a first grant, a connect again), clearing
    ``needs_reauth``; the caller's transaction commits it."""
    await session.execute(
        insert(ConnectionTokenRow)
        .values(tenant_id=tenant_id, connection_id=connection_id)
        .on_conflict_do_nothing()
    )
    row = await _read(session, tenant_id, connection_id, lock=True)
    assert row is not None
    state = await _write(session, cipher, row, _state(cipher, row), minted, now)
    await session.execute(
        update(ConnectionRow)
        .where(ConnectionRow.id == connection_id, ConnectionRow.tenant_id == tenant_id)
        .values(needs_reauth_at=None, needs_reauth_reason=None)
    )
    return state


async def _write(
    session: AsyncSession,
    cipher: ConnectionCipher,
    row: ConnectionTokenRow,
    before: TokenState,
    minted: Minted,
    now: datetime | None,
) -> TokenState:
    access = cipher.seal(minted.access_token, _ctx(row.tenant_id, row.connection_id, "access"))
    refresh_token = minted.refresh_token or before.refresh_token
    refresh = (
        cipher.seal(refresh_token, _ctx(row.tenant_id, row.connection_id, "refresh"))
        if refresh_token is not None
        else None
    )
    row.key_id = access.key_id
    row.access_nonce, row.access_ciphertext = access.nonce, access.ciphertext
    row.refresh_nonce = refresh.nonce if refresh else None
    row.refresh_ciphertext = refresh.ciphertext if refresh else None
    row.expires_at = minted.expires_at
    row.generation = before.generation + 1
    row.refreshed_at = now or datetime.now(UTC)
    await session.flush()
    return TokenState(minted.access_token, refresh_token, minted.expires_at, row.generation)


async def current(
    sessions: async_sessionmaker[AsyncSession],
    cipher: ConnectionCipher,
    tenant_id: str,
    connection_id: str,
    mint: Mint,
    *,
    refused_generation: int | None = None,
    skew: timedelta = DEFAULT_SKEW,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> TokenState:
    """The connection's access token, fresh: read, or refreshed by ``mint`` once across
    every process (see the module). ``refused_generation``: the provider refused the token
    of that generation although it looked fresh (revoked early): refresh unless another
    caller already has. Raises ``NeedsReauth`` when the connection needs a person, and
    lets ``mint``'s other errors through (nothing changes: a later call tries again)."""
    async with tenancy.tenant_transaction(sessions, tenant_id) as session:
        reason = await _needs_reauth(session, connection_id)
        if reason is not None:
            raise NeedsReauth(connection_id, reason)
        state = _state(cipher, await _read(session, tenant_id, connection_id, lock=False))
    if _usable(state, refused_generation, now(), skew):
        return state
    async with tenancy.tenant_transaction(sessions, tenant_id) as session:
        await session.execute(
            insert(ConnectionTokenRow)
            .values(tenant_id=tenant_id, connection_id=connection_id)
            .on_conflict_do_nothing()
        )
        row = await _read(session, tenant_id, connection_id, lock=True)
        assert row is not None
        reason = await _needs_reauth(session, connection_id)
        if reason is not None:
            raise NeedsReauth(connection_id, reason)
        state = _state(cipher, row)
        if _usable(state, refused_generation, now(), skew):
            return state  # another process refreshed it while this one waited
        try:
            minted = await mint(state)
        except Refused as refused:
            await session.execute(
                update(ConnectionRow)
                .where(ConnectionRow.id == connection_id, ConnectionRow.tenant_id == tenant_id)
                .values(needs_reauth_at=now(), needs_reauth_reason=refused.reason)
            )
            await _announce(session, tenant_id, connection_id, refused.reason, now())
            reason = refused.reason
        else:
            return await _write(session, cipher, row, state, minted, now())
    raise NeedsReauth(connection_id, reason)


async def _announce(
    session: AsyncSession, tenant_id: str, connection_id: str, reason: str, at: datetime
) -> None:
    await outbox.enqueue(
        session,
        tenant_id=tenant_id,
        event_type=WebhookEventType.CONNECTION_NEEDS_REAUTH,
        aggregate_id=connection_id,
        data={
            "connection_id": connection_id,
            "needs_reauth_at": at.isoformat(),
            "reason": reason,
            "what_to_do": f"moat connection connect {connection_id}",
        },
        occurred_at=at,
    )


def _usable(
    state: TokenState, refused_generation: int | None, now: datetime, skew: timedelta
) -> bool:
    if refused_generation is not None and state.generation <= refused_generation:
        return False
    return state.fresh(now, skew)
