"""OAuth 2 connections against a real authorization server (authlib, refresh token rotation
with reuse detection): 200 concurrent calls on a connection whose access token has just
expired refresh it exactly once and all succeed; ``invalid_grant`` marks the connection
``needs_reauth`` and the next call is refused at once without calling the provider;
connecting it again clears the mark; the tokens are sealed at rest."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.exceptions import ApplicationError

from activities.adapters.guard import HostGuard
from activities.adapters.http import HttpAdapter
from activities.adapters.sender import SendRequest, http_client, send
from activities.alerts import Alerter
from activities.connections import StoreConnectionResolver
from activities.execute.adapter import AdapterStep
from activities.oauth import OAuthTokens
from schemas.alerts import AlertKind
from schemas.capabilities import CapabilityCatalog
from schemas.errors import ErrorCode
from schemas.oauth import OAUTH2, check_config
from schemas.run import AdapterInput
from schemas.settings import MoatSettings
from store import connection_tokens, connections, tenancy, tenants, webhooks
from store.connection_tokens import Minted
from store.keyrings.codec import OutputSealer
from store.keyrings.connections import ConnectionCipher
from store.models import OutboxRow
from tests.support.oauth_server import Client, OAuthServer, Token

CALLS = 200


@pytest.fixture(scope="module")
def server() -> Iterator[OAuthServer]:
    with OAuthServer() as running:
        yield running


@pytest.fixture
def cipher(base_settings: MoatSettings) -> ConnectionCipher:
    """The session's keyring: its rows share the database with every other test's."""
    return ConnectionCipher.from_settings(base_settings)


async def _connected(
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
    cipher: ConnectionCipher,
    server: OAuthServer,
    client: Client,
    pair: Token | None,
    **config: str,
) -> tuple[str, str]:
    """A tenant's ``oauth2`` connection on ``server`` (the ``oidc`` profile, its token
    endpoint found by discovery), holding ``pair`` as connecting it stored it."""
    async with sessions.begin() as session:
        tenant = await tenants.create_tenant(session, f"oauth-{uuid.uuid4().hex[:8]}")
    checked = check_config(
        {"profile": "oidc", "client_id": client.client_id, "issuer": server.url}
        | {"base_url": server.url, "scopes": ["read"]}
        | config
    )
    async with tenancy.tenant_transaction(app_sessions, tenant.id) as session:
        row = await connections.create_connection(
            session,
            cipher,
            tenant_id=tenant.id,
            type=OAUTH2,
            name="oauth",
            secret=client.client_secret,
            config=checked,
        )
        if pair is not None:
            expires_at = datetime.fromtimestamp(pair.expires_at, UTC)
            minted = Minted(pair.access_token, expires_at, pair.refresh_token)
            await connection_tokens.store(session, cipher, tenant.id, row.id, minted)
        return tenant.id, row.id


def _guard(server: OAuthServer) -> HostGuard:
    return HostGuard([server.url.removeprefix("http://")])


async def _call(
    resolver: StoreConnectionResolver,
    http: httpx.AsyncClient,
    guard: HostGuard,
    server: OAuthServer,
    tenant_id: str,
    connection_id: str,
) -> int:
    """One adapter call: the credential resolved, the bearer presented to the resource."""
    credential = await resolver.resolve(tenant_id, connection_id)
    request = SendRequest(
        "GET",
        f"{server.url}/resource",
        headers={"Authorization": f"Bearer {credential.secret}"},
        timeout=30,
        credential=credential,
    )
    return (await send(http, guard, request)).status


async def test_200_calls_on_an_expired_token_refresh_it_once_and_all_succeed(
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
    cipher: ConnectionCipher,
    server: OAuthServer,
) -> None:
    client = server.add_client()
    grant = server.grant(client, "ada", expires_in=0)  # expired just now
    tenant_id, connection_id = await _connected(
        sessions, app_sessions, cipher, server, client, grant
    )
    before = (server.counts.refreshes, server.counts.invalid_grant)
    guard = _guard(server)
    async with http_client() as http:
        tokens = OAuthTokens(app_sessions, cipher, http, guard)
        resolver = StoreConnectionResolver(app_sessions, cipher, tokens=tokens)
        started = time.monotonic()
        statuses = await asyncio.gather(
            *(_call(resolver, http, guard, server, tenant_id, connection_id) for _ in range(CALLS)),
            return_exceptions=True,
        )
        wall = time.monotonic() - started
    failures = [s for s in statuses if s != 200]
    refreshes = server.counts.refreshes - before[0]
    print(
        f"\noauth refresh under load: calls={CALLS} refreshes={refreshes} "
        f"mints={tokens.refreshes} invalid_grant={server.counts.invalid_grant - before[1]} "
        f"failures={len(failures)} wall={wall:.2f}s"
    )
    assert failures == []
    assert refreshes == 1 and tokens.refreshes == 1
    assert server.counts.invalid_grant == before[1]
    assert not server.by_refresh[grant.refresh_token or ""].revoked  # no reuse, no revocation
    await _sealed_at_rest(sessions, server, grant)


async def _sealed_at_rest(
    sessions: async_sessionmaker[AsyncSession], server: OAuthServer, grant: Token
) -> None:
    """No token the server issued to this family, nor the client secret, is stored in the
    clear in any table."""
    family = [t for t in server.by_access.values() if t.family == grant.family]
    secrets = {t.access_token for t in family} | {t.refresh_token or "" for t in family}
    secrets |= {c.client_secret for c in server.clients.values()}
    async with sessions.begin() as session:
        tables = (
            await session.execute(
                text("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
            )
        ).scalars()
        for table in list(tables):
            dump = (
                await session.execute(
                    text(f"SELECT coalesce(string_agg(t::text, ''), '') FROM \"{table}\" t")
                )
            ).scalar_one()
            assert not any(s and s in dump for s in secrets), table


class HandOffs(Alerter):
    """The alerter's hand-offs, recorded (starting the alert's run is Alerter's own test)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, AlertKind, str]] = []

    async def hand_off(self, tenant_id: str, kind: AlertKind, event_id: str) -> None:
        self.calls.append((tenant_id, kind, event_id))


async def test_invalid_grant_marks_needs_reauth_and_reconnecting_clears_it(
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
    cipher: ConnectionCipher,
    server: OAuthServer,
    base_settings: MoatSettings,
) -> None:
    client = server.add_client()
    grant = server.grant(client, "grace", expires_in=0)
    # The refresh token was rotated elsewhere (a copy used it): presenting it again is reuse.
    grant.rotated = True
    tenant_id, connection_id = await _connected(
        sessions, app_sessions, cipher, server, client, grant
    )
    async with tenancy.tenant_transaction(app_sessions, tenant_id) as session:
        await webhooks.create(
            session,
            OutputSealer.from_settings(base_settings),
            tenant_id=tenant_id,
            url="https://hooks.example.com/moat",
            events=["connection.needs_reauth"],
            max_retries=1,
            retry_base_seconds=1.0,
        )
    guard = _guard(server)
    alerter = HandOffs()
    async with http_client() as http:
        tokens = OAuthTokens(app_sessions, cipher, http, guard, alerter=alerter)
        resolver = StoreConnectionResolver(app_sessions, cipher, tokens=tokens)
        with pytest.raises(ApplicationError) as first:
            await resolver.resolve(tenant_id, connection_id)
        assert first.value.type == ErrorCode.CONNECTION_NEEDS_REAUTH
        assert server.by_access[grant.access_token].revoked  # the family went
        asked = tokens.refreshes
        with pytest.raises(ApplicationError) as second:
            await resolver.resolve(tenant_id, connection_id)
        assert second.value.type == ErrorCode.CONNECTION_NEEDS_REAUTH
        assert second.value.non_retryable
        assert "moat connection connect" in str(second.value)
        assert tokens.refreshes == asked  # refused without asking the provider
        # The operators' alert is handed off on each refusal; its id (the connection's)
        # makes it one alert (tests/system/test_operations_alerts.py).
        assert alerter.calls == [(tenant_id, AlertKind.CONNECTION_NEEDS_REAUTH, connection_id)] * 2
        async with sessions.begin() as session:
            announced = (
                await session.execute(select(OutboxRow).where(OutboxRow.tenant_id == tenant_id))
            ).scalar_one()
        assert announced.event_type == "connection.needs_reauth"
        assert announced.aggregate_id == connection_id
        # Connected again: a new grant stored, the mark cleared, calls succeed.
        again = server.grant(client, "grace", expires_in=3600)
        async with tenancy.tenant_transaction(app_sessions, tenant_id) as session:
            expires_at = datetime.now(UTC) + timedelta(hours=1)
            minted = Minted(again.access_token, expires_at, again.refresh_token)
            await connection_tokens.store(session, cipher, tenant_id, connection_id, minted)
        status = await _call(resolver, http, guard, server, tenant_id, connection_id)
    assert status == 200


async def test_client_credentials_are_minted_on_demand(
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
    cipher: ConnectionCipher,
    server: OAuthServer,
) -> None:
    client = server.add_client(auth_method="client_secret_basic")
    tenant_id, connection_id = await _connected(
        sessions, app_sessions, cipher, server, client, None, grant="client_credentials"
    )
    guard = _guard(server)
    before = server.counts.client_credentials
    async with http_client() as http:
        tokens = OAuthTokens(app_sessions, cipher, http, guard)
        resolver = StoreConnectionResolver(app_sessions, cipher, tokens=tokens)
        statuses = await asyncio.gather(
            *(_call(resolver, http, guard, server, tenant_id, connection_id) for _ in range(20))
        )
    assert statuses == [200] * 20
    assert server.counts.client_credentials - before == 1


async def test_a_token_refused_early_is_refreshed_once_and_the_call_made_again(
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
    cipher: ConnectionCipher,
    server: OAuthServer,
) -> None:
    client = server.add_client()
    grant = server.grant(client, "alan", expires_in=3600)
    tenant_id, connection_id = await _connected(
        sessions, app_sessions, cipher, server, client, grant
    )
    del server.by_access[grant.access_token]  # revoked by the provider before its expiry
    spec = CapabilityCatalog().get("http.request")
    assert spec is not None
    inp = AdapterInput(
        tenant_id=tenant_id,
        connection_id=connection_id,
        capability=spec,
        input={"method": "GET", "url": f"{server.url}/resource"},
        idempotency_key=f"moat-oauth-{uuid.uuid4().hex}",
        trace_id="0" * 32,
    )
    guard = _guard(server)
    before = (server.counts.refreshes, server.counts.resource_refused, server.counts.resource_ok)
    async with http_client() as http:
        tokens = OAuthTokens(app_sessions, cipher, http, guard)
        resolver = StoreConnectionResolver(app_sessions, cipher, tokens=tokens)
        step = AdapterStep(app_sessions, {}, connections=resolver)
        stale = await resolver.resolve(tenant_id, connection_id)
        await step._call(HttpAdapter(http, guard), inp, stale)
    assert server.counts.refreshes - before[0] == 1
    assert server.counts.resource_refused - before[1] == 1
    assert server.counts.resource_ok - before[2] == 1
