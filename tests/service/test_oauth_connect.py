"""Connecting a person's account to an ``oauth2`` connection against a real provider
(authlib's authorization code grant, PKCE S256 required): the authorization URL carries a
sealed state and the S256 challenge; the code comes back and is exchanged with the
verifier the state seals; the pair is stored sealed and ``needs_reauth`` is cleared; a
state not made by this Moat is refused."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from schemas.oauth import OAUTH2, check_config
from schemas.settings import MoatSettings
from starter.service import MoatError, oauth_connect
from store import connection_tokens, connections, tenancy, tenants
from store.keyrings.connections import ConnectionCipher
from store.models import ConnectionRow
from tests.support.oidc import OpenIDProvider

REDIRECT = "http://127.0.0.1:9/v1/connections/oauth/callback"


@pytest.fixture(scope="module")
def idp() -> Iterator[OpenIDProvider]:
    with OpenIDProvider() as running:
        yield running


async def test_a_person_connects_the_account_and_the_mark_goes(
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
    idp: OpenIDProvider,
    base_settings: MoatSettings,
) -> None:
    cipher = ConnectionCipher.from_settings(base_settings)
    client = idp.add_client(REDIRECT)
    user = idp.add_user("ada")
    async with sessions.begin() as session:
        tenant = await tenants.create_tenant(session, f"connect-{uuid.uuid4().hex[:8]}")
    config = check_config(
        {"profile": "oidc", "client_id": client.client_id, "issuer": idp.issuer}
        | {"scopes": ["profile"], "base_url": idp.issuer}
    )
    allow = [idp.issuer.removeprefix("http://")]
    async with tenancy.tenant_transaction(app_sessions, tenant.id) as session:
        row = await connections.create_connection(
            session,
            cipher,
            tenant_id=tenant.id,
            type=OAUTH2,
            name="idp",
            secret=client.client_secret,
            config=config,
        )
        await session.execute(
            update(ConnectionRow)
            .where(ConnectionRow.id == row.id)
            .values(needs_reauth_at=datetime.now(UTC), needs_reauth_reason="invalid_grant")
        )
    async with httpx.AsyncClient(follow_redirects=False) as http:
        async with tenancy.tenant_transaction(app_sessions, tenant.id) as session:
            found = await oauth_connect.metadata(http, config, allow)
            url = await oauth_connect.begin(
                session, cipher, tenant.id, row.id, redirect_uri=REDIRECT, found=found
            )
        query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
        assert query["code_challenge_method"] == "S256" and query["state"]
        # The person signs in at the provider, which sends them back with a code.
        back = await http.post(url, data={"username": user.username, "password": user.password})
        assert back.status_code == 302, back.text
        answer = {k: v[0] for k, v in parse_qs(urlsplit(back.headers["location"]).query).items()}
        tenant_id, connection_id, verifier = oauth_connect.open_state(cipher, answer["state"])
        assert (tenant_id, connection_id) == (tenant.id, row.id)
        async with tenancy.tenant_transaction(app_sessions, tenant.id) as session:
            await oauth_connect.finish(
                session,
                cipher,
                http,
                tenant_id=tenant_id,
                connection_id=connection_id,
                verifier=verifier,
                code=answer["code"],
                redirect_uri=REDIRECT,
                allow=allow,
            )

    async def unused(state: connection_tokens.TokenState) -> connection_tokens.Minted:
        raise AssertionError("a fresh token is not minted again")

    state = await connection_tokens.current(app_sessions, cipher, tenant.id, row.id, unused)
    assert state.access_token in idp.tokens  # the provider's own token, stored sealed
    with pytest.raises(MoatError):
        oauth_connect.open_state(ConnectionCipher({"k1": os.urandom(32)}, "k1"), answer["state"])
