"""A tenant's people (``people``). Every function takes the caller's session, scoped to the
tenant (row-level security), and only flushes. A person is disabled, never deleted."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from schemas.approvals import person_actor
from schemas.people import Person, PersonSet
from store.models import ConsoleSessionRow, PersonRow


def to_person(row: PersonRow) -> Person:
    return Person(
        tenant_id=row.tenant_id,
        handle=row.handle,
        actor=person_actor(row.handle),
        display_name=row.display_name,
        scopes=list(row.scopes),
        oidc_issuer=row.oidc_issuer,
        oidc_subject=row.oidc_subject,
        slack_user_id=row.slack_user_id,
        created_by=row.created_by,
        created_at=row.created_at,
        updated_at=row.updated_at,
        disabled_at=row.disabled_at,
    )


async def get(session: AsyncSession, tenant_id: str, handle: str) -> PersonRow | None:
    return await session.get(PersonRow, (tenant_id, handle))


async def list_people(session: AsyncSession, tenant_id: str) -> Sequence[PersonRow]:
    query = select(PersonRow).where(PersonRow.tenant_id == tenant_id).order_by(PersonRow.handle)
    return (await session.scalars(query)).all()


async def by_oidc(
    session: AsyncSession, tenant_id: str, issuer: str, subject: str
) -> PersonRow | None:
    query = select(PersonRow).where(
        PersonRow.tenant_id == tenant_id,
        PersonRow.oidc_issuer == issuer,
        PersonRow.oidc_subject == subject,
    )
    return (await session.scalars(query)).one_or_none()


async def by_slack_user(
    session: AsyncSession, tenant_id: str, slack_user_id: str
) -> PersonRow | None:
    query = select(PersonRow).where(
        PersonRow.tenant_id == tenant_id, PersonRow.slack_user_id == slack_user_id
    )
    return (await session.scalars(query)).one_or_none()


async def holders_of(
    session: AsyncSession,
    tenant_id: str,
    handle: str,
    body: PersonSet,
) -> list[str]:
    """Other people of the tenant who already hold ``body``'s OIDC subject or Slack user."""
    found: list[str] = []
    if body.oidc_issuer is not None and body.oidc_subject is not None:
        row = await by_oidc(session, tenant_id, body.oidc_issuer, body.oidc_subject)
        found += [row.handle] if row is not None and row.handle != handle else []
    if body.slack_user_id is not None:
        row = await by_slack_user(session, tenant_id, body.slack_user_id)
        found += [row.handle] if row is not None and row.handle != handle else []
    return found


async def put(
    session: AsyncSession,
    tenant_id: str,
    handle: str,
    body: PersonSet,
    actor: str,
    now: datetime,
) -> PersonRow:
    """Add the person, or set an existing one to ``body`` (enabling them again). An
    existing person's console sessions end: they hold the scopes of the sign-in, and the
    person signs in again under the new ones."""
    row = await get(session, tenant_id, handle)
    if row is None:
        row = PersonRow(tenant_id=tenant_id, handle=handle, created_by=actor, created_at=now)
        session.add(row)
    else:
        await end_sessions(session, tenant_id, handle, now)
    row.display_name = body.display_name
    row.scopes = list(dict.fromkeys(body.scopes))
    row.oidc_issuer = body.oidc_issuer
    row.oidc_subject = body.oidc_subject
    row.slack_user_id = body.slack_user_id
    row.updated_at = now
    row.disabled_at = None
    await session.flush()
    return row


async def disable(session: AsyncSession, row: PersonRow, now: datetime) -> PersonRow:
    """Disable the person (the first time is kept). Their console sessions end with it:
    a session is checked against its person on every request, and says why it ended; a
    ``put`` enabling the person again revokes them for good."""
    if row.disabled_at is None:
        row.disabled_at = now
        row.updated_at = now
    await session.flush()
    return row


async def end_sessions(session: AsyncSession, tenant_id: str, handle: str, now: datetime) -> None:
    """Revoke every console session the person has open."""
    await session.execute(
        update(ConsoleSessionRow)
        .where(
            ConsoleSessionRow.tenant_id == tenant_id,
            ConsoleSessionRow.actor == person_actor(handle),
            ConsoleSessionRow.revoked_at.is_(None),
        )
        .values(revoked_at=now)
    )
