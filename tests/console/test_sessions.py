"""The console's session service, without HTTP: a person's session (as OpenID Connect
sign-in opens it) signs in ``person:<handle>`` with the scopes given, until the person is
disabled; a cookie naming another tenant, or with another secret, signs in no one; only the
secret's hash is stored."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from starter.service import console_sessions
from starter.service.console_sessions import Ended, Principal
from store import tenants
from store.models import ConsoleSessionRow, PersonRow


async def new_tenant(owner: async_sessionmaker[AsyncSession]) -> str:
    async with owner.begin() as session:
        return (await tenants.create_tenant(session, f"t-{uuid.uuid4().hex[:12]}")).id


async def test_a_persons_session_lasts_until_the_person_is_disabled(
    sessions: async_sessionmaker[AsyncSession], app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    tenant_id, other = await new_tenant(sessions), await new_tenant(sessions)
    async with sessions.begin() as session:
        session.add(PersonRow(tenant_id=tenant_id, handle="ada", created_by="admin"))
    opened = await console_sessions.open_for_person(
        app_sessions,
        tenant_id=tenant_id,
        handle="ada",
        scopes=["approvals:read", "approvals:write"],
        lifetime_seconds=600,
    )
    found = await console_sessions.resolve(app_sessions, opened.cookie)
    assert isinstance(found, Principal)
    assert (found.actor, found.via, found.key_id) == ("person:ada", "oidc", None)
    assert found.scopes == ("approvals:read", "approvals:write")
    assert found.csrf_token == opened.principal.csrf_token
    _, session_id, secret = opened.cookie.split(".")
    # Another tenant's name, another secret, nonsense: nobody.
    for cookie in (f"{other}.{session_id}.{secret}", f"{tenant_id}.{session_id}.x", "a.b"):
        assert await console_sessions.resolve(app_sessions, cookie) is Ended.UNKNOWN
    assert await console_sessions.resolve(app_sessions, None) is Ended.NONE
    async with sessions() as session:
        row = await session.scalar(select(ConsoleSessionRow).filter_by(id=session_id))
    assert row is not None and secret not in row.secret_hash
    async with sessions.begin() as session:
        await session.execute(
            update(PersonRow)
            .where(PersonRow.tenant_id == tenant_id, PersonRow.handle == "ada")
            .values(disabled_at=datetime.now(UTC))
        )
    assert await console_sessions.resolve(app_sessions, opened.cookie) is Ended.PERSON_DISABLED
    # A person the tenant does not have signs in no one either.
    ghost = await console_sessions.open_for_person(
        app_sessions, tenant_id=tenant_id, handle="ghost", scopes=[], lifetime_seconds=600
    )
    assert await console_sessions.resolve(app_sessions, ghost.cookie) is Ended.PERSON_DISABLED
