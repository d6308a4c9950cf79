"""``db.DriverStatement``: a SQLAlchemy statement sent past SQLAlchemy binds its parameters
as SQLAlchemy binds them, so the same statement gives the same row either way."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

import pytest
from sqlalchemy import Boolean, Date, DateTime, String, bindparam, literal, select
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store import db

STATEMENT = select(
    bindparam("document", type_=JSONB),
    bindparam("flag", type_=Boolean),
    bindparam("day", type_=Date),
    bindparam("at", type_=DateTime(timezone=True)),
    bindparam("text", type_=String),
    literal("fixed"),  # a parameter the statement binds itself
)
VALUES: dict[str, Any] = {
    "document": {"nested": [1, "two", None, {"three": 3.5}], "unicode": "é\u2028"},
    "flag": True,
    "day": date(2026, 11, 27),
    "at": datetime(2026, 11, 27, 12, 30, tzinfo=UTC),
    "text": "it's 100% \\ plain",
}


async def test_the_same_row_either_way(sessions: async_sessionmaker[AsyncSession]) -> None:
    driver = db.DriverStatement(STATEMENT)
    assert "%(document)s" in driver.sql
    async with sessions.begin() as session:
        through_sqlalchemy = tuple((await session.execute(STATEMENT, VALUES)).one())
        [past_it] = await db.pipelined(session, [(driver.sql, driver.params(VALUES))])
    assert past_it == through_sqlalchemy
    assert past_it == (*VALUES.values(), "fixed")


def test_a_missing_parameter_is_refused() -> None:
    driver = db.DriverStatement(STATEMENT)
    with pytest.raises(Exception, match="flag"):
        driver.params({k: v for k, v in VALUES.items() if k != "flag"})
