"""The tenant of a transaction: row-level security sees only the rows of the tenant named."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

_SET_TENANT = "SELECT set_config('moat.tenant_id', %(tenant)s, true)"


async def set_tenant(session: AsyncSession, tenant_id: str) -> None:
    """Scope the rest of the session's transaction to one tenant.

    Row-level security lets the application role see and write only the rows of the tenant
    named here; unset, it sees nothing. Call it first in every transaction of the app role.

    Sent in one round trip with the transaction's ``BEGIN`` (psycopg's pipeline mode),
    where a plain statement would wait for the ``BEGIN`` first: every transaction of an
    execution starts here, and a round trip to Postgres costs more than the statement.
    """
    connection = await session.connection()
    raw = (await connection.get_raw_connection()).driver_connection
    assert isinstance(raw, psycopg.AsyncConnection), "Moat's engines are psycopg's"
    params = {"tenant": tenant_id}
    try:
        async with raw.pipeline():
            await raw.execute(_SET_TENANT, params)
    except psycopg.Error as err:
        # Raised as SQLAlchemy raises a failed statement, and a connection Postgres dropped
        # is not handed out again.
        gone = raw.closed or raw.broken
        if gone:
            await connection.invalidate(err)
        raise DBAPIError.instance(
            _SET_TENANT,
            params,
            err,
            psycopg.Error,
            connection_invalidated=gone,
            dialect=connection.dialect,
        ) from err


@asynccontextmanager
async def tenant_transaction(
    sessions: async_sessionmaker[AsyncSession], tenant_id: str
) -> AsyncIterator[AsyncSession]:
    """``async with tenant_transaction(sessions, tenant) as session``: a transaction scoped to
    ``tenant``, committed on success."""
    async with sessions.begin() as session:
        await set_tenant(session, tenant_id)
        yield session
