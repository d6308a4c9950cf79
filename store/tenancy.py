"""The tenant of a transaction: row-level security sees only the rows of the tenant named."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store import db

SET_TENANT = "SELECT set_config('moat.tenant_id', %(tenant)s, true)"


async def set_tenant(session: AsyncSession, tenant_id: str) -> None:
    """Scope the rest of the session's transaction to one tenant.

    Row-level security lets the application role see and write only the rows of the tenant
    named here; unset, it sees nothing. Call it first in every transaction of the app role.
    It goes out in one round trip with the transaction's ``BEGIN`` (``db.pipelined``).
    """
    await db.pipelined(session, [(SET_TENANT, {"tenant": tenant_id})])


@asynccontextmanager
async def tenant_transaction(
    sessions: async_sessionmaker[AsyncSession], tenant_id: str
) -> AsyncIterator[AsyncSession]:
    """``async with tenant_transaction(sessions, tenant) as session``: a transaction scoped to
    ``tenant``, committed on success."""
    async with sessions.begin() as session:
        await set_tenant(session, tenant_id)
        yield session
