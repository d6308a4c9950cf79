"""Database sessions for the processes that are not long-running: an operator command gets
one transaction as the owner role, on an engine of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from schemas.settings import MoatSettings
from store import make_engine, make_sessionmaker


@asynccontextmanager
async def owner_sessions(settings: MoatSettings) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    """Sessions as the owner role (``MOAT_DATABASE_URL``), on a one-connection engine that
    is disposed of on exit."""
    engine = make_engine(settings.sqlalchemy_url, pool_size=1)
    try:
        yield make_sessionmaker(engine)
    finally:
        await engine.dispose()


@asynccontextmanager
async def owner_transaction(settings: MoatSettings) -> AsyncIterator[AsyncSession]:
    """One transaction as the owner role, committed on success."""
    async with owner_sessions(settings) as sessions, sessions.begin() as session:
        yield session
