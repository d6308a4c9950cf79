"""``db.pipelined``: a transaction's first pipeline carries the transaction's ``BEGIN``, so
its statements go in one round trip (one Sync), not after psycopg's own ``BEGIN`` with a
Sync and a wait of its own. Every transaction stays one: what runs after the pipeline, a
commit inside it, a rollback, and the next transactions on the same connection."""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest
import pytest_asyncio
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from schemas.settings import MoatSettings
from store import db

PROBE = "pipeline_begin_probe"


class Failed(Exception):
    """Raised in a transaction to roll it back."""


@pytest_asyncio.fixture(loop_scope="session")
async def one_connection(
    moat_settings: MoatSettings,
) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    """Sessions on an engine of one connection (every transaction on the same one), with a
    temporary table of its own."""
    engine = db.make_engine(moat_settings.sqlalchemy_url, pool_size=1)
    engine.pool._max_overflow = 0  # type: ignore[attr-defined]
    sessions = db.make_sessionmaker(engine)
    async with sessions.begin() as session:
        await session.execute(text(f"CREATE TEMP TABLE {PROBE} (x int)"))
    try:
        yield sessions
    finally:
        await engine.dispose()


async def _raw(session: AsyncSession) -> psycopg.AsyncConnection:
    connection = await session.connection()
    raw = (await connection.get_raw_connection()).driver_connection
    assert isinstance(raw, psycopg.AsyncConnection)
    return raw


async def _rows(sessions: async_sessionmaker[AsyncSession]) -> list[int]:
    async with sessions.begin() as session:
        return [r[0] for r in await session.execute(text(f"SELECT x FROM {PROBE} ORDER BY x"))]


def _insert(x: int) -> tuple[str, dict[str, int]]:
    return f"INSERT INTO {PROBE} (x) VALUES (%(x)s)", {"x": x}


async def test_the_first_pipeline_sends_its_begin_with_its_statements(
    one_connection: async_sessionmaker[AsyncSession],
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        trace = Path(folder) / "trace"
        with trace.open("w") as out:
            async with one_connection.begin() as session:
                raw = await _raw(session)
                raw.pgconn.trace(out.fileno())
                try:
                    await db.pipelined(session, [_insert(1), ("SELECT 1", {})])
                    await db.pipelined_rows(session, [_insert(2)], commit=True)
                finally:
                    raw.pgconn.untrace()
                out.flush()
                os.fsync(out.fileno())
        sent = [line.split("\t") for line in trace.read_text().splitlines()]
    # libpq's trace: time, F (sent) or B (received), length, message, its fields.
    frontend = [(f[3], f[4] if len(f) > 4 else "") for f in sent if len(f) > 3 and f[1] == "F"]
    messages = [message for message, _ in frontend]
    # Two pipelines, one Sync each: the first's BEGIN went with its statements.
    assert messages.count("Sync") == 2
    first = frontend[: messages.index("Sync")]
    parsed = [fields.split('"')[3] for message, fields in first if message == "Parse"]
    assert parsed == ["BEGIN", f"INSERT INTO {PROBE} (x) VALUES ($1)", "SELECT 1"]
    assert sum('"BEGIN"' in fields for _, fields in frontend) == 1
    assert await _rows(one_connection) == [1, 2]


async def test_every_transaction_stays_one(
    one_connection: async_sessionmaker[AsyncSession],
) -> None:
    sessions = one_connection
    # Opened by a pipeline, then statements through SQLAlchemy: rolled back together.
    with pytest.raises(Failed):
        async with sessions.begin() as session:
            await db.pipelined(session, [_insert(10)])
            await session.execute(text(f"INSERT INTO {PROBE} VALUES (11)"))
            raise Failed
    # The next transaction on the same connection, with no pipeline: still a transaction.
    with pytest.raises(Failed):
        async with sessions.begin() as session:
            await session.execute(text(f"INSERT INTO {PROBE} VALUES (12)"))
            assert not (await _raw(session)).autocommit
            raise Failed
    # A pipeline that commits, then more statements in the session: a transaction of their
    # own, rolled back without the committed one.
    with pytest.raises(Failed):
        async with sessions.begin() as session:
            await db.pipelined_rows(session, [_insert(13)], commit=True)
            await session.execute(text(f"INSERT INTO {PROBE} VALUES (14)"))
            await session.execute(text(f"INSERT INTO {PROBE} VALUES (15)"))
            raise Failed
    # A failed statement in the first pipeline: nothing of the transaction is kept.
    with pytest.raises(Exception, match="division by zero"):
        async with sessions.begin() as session:
            await db.pipelined(session, [_insert(16), ("SELECT 1 / 0", {})])
    assert await _rows(sessions) == [13]
    async with sessions.begin() as session:
        assert not (await _raw(session)).autocommit


async def test_a_pipeline_s_statements_are_sent_after_one_wait(
    one_connection: async_sessionmaker[AsyncSession], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pipeline's statements (its BEGIN and COMMIT included) are queued, then sent
    together: one wait on the connection's socket before the Sync, not one a statement
    (each a turn of the event loop). A failed statement still keeps those after it, the
    COMMIT too, from running."""
    waits: list[str] = []
    wait = psycopg.AsyncConnection.wait

    async def counted(self: psycopg.AsyncConnection, gen: object, **kw: object) -> object:
        waits.append(getattr(gen, "__qualname__", ""))
        return await wait(self, gen, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(psycopg.AsyncConnection, "wait", counted)
    async with one_connection.begin() as session:
        statements = [_insert(x) for x in (10, 11, 12)] + [("SELECT 2", {})]
        rows = await db.pipelined_rows(session, statements, commit=True)
    # The waits inside the pipeline, between its entry and its exit (the Sync's).
    entered = waits.index("BasePipeline._enter_gen")
    inside = waits[entered + 1 : waits.index("BasePipeline._exit_gen", entered)]
    assert len(inside) == 1, waits
    assert rows[-1] == (["?column?"], [(2,)])
    assert await _rows(one_connection) == [10, 11, 12]
    with pytest.raises(Exception, match="division by zero"):
        async with one_connection.begin() as session:
            failing = [_insert(13), ("SELECT 1 / 0", {}), _insert(14)]
            await db.pipelined_rows(session, failing, commit=True)
    assert await _rows(one_connection) == [10, 11, 12]
