"""Database sessions for the processes that are not long-running (an operator command gets
one transaction as the owner role, on an engine of its own), reads across every tenant (one
transaction each), and how to tell a database that is briefly away from a fault."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import psycopg
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from schemas.settings import MoatSettings
from store import make_engine, make_sessionmaker, tenancy, tenants

T = TypeVar("T")


@asynccontextmanager
async def owner_sessions(settings: MoatSettings) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    """Sessions as the owner role (``MOAT_DATABASE_URL``), on a one-connection engine that
    is disposed of on exit; a database that does not answer within 2 s is not there."""
    engine = make_engine(settings.sqlalchemy_url, pool_size=1, connect_timeout=2)
    try:
        yield make_sessionmaker(engine)
    finally:
        await engine.dispose()


@asynccontextmanager
async def owner_transaction(settings: MoatSettings) -> AsyncIterator[AsyncSession]:
    """One transaction as the owner role, committed on success."""
    async with owner_sessions(settings) as sessions, sessions.begin() as session:
        yield session


async def every_tenant(
    sessions: async_sessionmaker[AsyncSession],
    read: Callable[[AsyncSession, str], Awaitable[T]],
) -> list[T]:
    """``read(session, tenant_id)`` of every tenant, each in a transaction of its own scoped
    to it, so row-level security holds throughout (the tenants' ids are read in one before
    them)."""
    async with sessions.begin() as session:
        everyone = await tenants.tenant_ids(session)
    found = []
    for tenant_id in everyone:
        async with tenancy.tenant_transaction(sessions, tenant_id) as session:
            found.append(await read(session, tenant_id))
    return found


def connection_trouble(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) says PostgreSQL is out of reach for now rather
    than that a statement is wrong: connection refused or lost (a restart, an
    administrator's shutdown, a network cut), the pool exhausted, the server shutting down
    or still starting, a statement cancelled or a transaction rolled back by the server's
    operation (``OperationalError``, SQLSTATE classes 08, 53, 57, 58)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, sa_exc.DBAPIError) and cause.connection_invalidated:
            return True
        if isinstance(
            cause,
            sa_exc.OperationalError
            | sa_exc.InterfaceError
            | sa_exc.TimeoutError
            | psycopg.OperationalError
            | psycopg.InterfaceError,
        ):
            return True
        cause = cause.__cause__ or cause.__context__
    return False
