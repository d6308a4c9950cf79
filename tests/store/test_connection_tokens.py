"""A connection's short-lived token is refreshed once across concurrent callers (each in
its own database connection, as separate workers would be), a refusal for good marks the
connection ``needs_reauth`` at once for everyone, a token the provider refused early is
refreshed once, and both tokens are sealed at rest."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from schemas.connections import ConnectionType
from schemas.settings import MoatSettings
from store import connection_tokens, connections, tenancy, tenants
from store.connection_tokens import Minted, NeedsReauth, Refused, TokenState
from store.keyrings.connections import ConnectionCipher

CALLERS = 50


class Provider:
    """A token endpoint that rotates its refresh token on every use and counts its calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.presented: list[str | None] = []

    async def mint(self, state: TokenState) -> Minted:
        self.calls += 1
        self.presented.append(state.refresh_token)
        await asyncio.sleep(0.05)  # the provider's round trip, with the lock held
        n = self.calls
        return Minted(
            access_token=f"access-{n}-{uuid.uuid4().hex}",
            expires_at=datetime.now(UTC) + timedelta(hours=1),
            refresh_token=f"refresh-{n}-{uuid.uuid4().hex}",
        )


async def _connection(
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
    cipher: ConnectionCipher,
) -> tuple[str, str]:
    async with sessions.begin() as session:
        tenant = await tenants.create_tenant(session, f"tok-{uuid.uuid4().hex[:8]}")
    async with tenancy.tenant_transaction(app_sessions, tenant.id) as session:
        row = await connections.create_connection(
            session,
            cipher,
            tenant_id=tenant.id,
            type=ConnectionType.SLACK,
            name="oauth",
            secret="client-secret-" + uuid.uuid4().hex,
            config={},
        )
        return tenant.id, row.id


@pytest.fixture
def cipher(base_settings: MoatSettings) -> ConnectionCipher:
    """The session's keyring: a row sealed under another breaks `moat connection
    reencrypt` for every later test in the process."""
    return ConnectionCipher.from_settings(base_settings)


async def test_concurrent_callers_refresh_once_and_never_reuse_a_refresh_token(
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
    cipher: ConnectionCipher,
) -> None:
    tenant_id, connection_id = await _connection(sessions, app_sessions, cipher)
    expired = Minted("access-0", datetime.now(UTC) - timedelta(seconds=1), "refresh-0")
    async with tenancy.tenant_transaction(app_sessions, tenant_id) as session:
        await connection_tokens.store(session, cipher, tenant_id, connection_id, expired)
    provider = Provider()

    async def call() -> TokenState:
        return await connection_tokens.current(
            app_sessions, cipher, tenant_id, connection_id, provider.mint
        )

    states = await asyncio.gather(*(call() for _ in range(CALLERS)))
    assert provider.calls == 1 and provider.presented == ["refresh-0"]
    assert {s.access_token for s in states} == {states[0].access_token}
    assert {s.generation for s in states} == {2}
    # The provider refused the new token early: one refresh, with the rotated token.
    refused = states[0].generation
    again = await asyncio.gather(
        *(
            connection_tokens.current(
                app_sessions,
                cipher,
                tenant_id,
                connection_id,
                provider.mint,
                refused_generation=refused,
            )
            for _ in range(CALLERS)
        )
    )
    assert provider.calls == 2 and provider.presented[1] == states[0].refresh_token
    assert {s.generation for s in again} == {3}
    # Sealed at rest: neither token is in the row's bytes.
    async with sessions() as session:
        raw = await session.scalar(
            text("SELECT row_to_json(t)::text FROM connection_tokens t WHERE connection_id = :c"),
            {"c": connection_id},
        )
    assert raw is not None
    for token in (again[0].access_token, again[0].refresh_token, "refresh-0"):
        assert token is not None and token not in raw


async def test_a_refusal_marks_the_connection_for_everyone_at_once(
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
    cipher: ConnectionCipher,
) -> None:
    tenant_id, connection_id = await _connection(sessions, app_sessions, cipher)
    calls = 0

    async def refuse(state: TokenState) -> Minted:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.02)
        raise Refused("the provider no longer accepts the refresh token (invalid_grant)")

    results = await asyncio.gather(
        *(
            connection_tokens.current(app_sessions, cipher, tenant_id, connection_id, refuse)
            for _ in range(10)
        ),
        return_exceptions=True,
    )
    assert calls == 1
    assert all(isinstance(r, NeedsReauth) for r in results), results
    # Connected again: the new pair clears the mark.
    async with tenancy.tenant_transaction(app_sessions, tenant_id) as session:
        await connection_tokens.store(
            session, cipher, tenant_id, connection_id, Minted("fresh", None, "r")
        )
    state = await connection_tokens.current(app_sessions, cipher, tenant_id, connection_id, refuse)
    assert state.access_token == "fresh" and calls == 1
