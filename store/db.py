"""Engines, sessions and migrations. The boundary (request, activity attempt) owns the
transaction; the query modules (one per aggregate) take the session and only flush."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import psycopg
from alembic import command
from alembic.config import Config
from psycopg import pq
from sqlalchemy import ClauseElement, Table, create_engine, event
from sqlalchemy.dialects.postgresql.psycopg import PGDialectAsync_psycopg
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.sql.compiler import SQLCompiler

MIGRATIONS = Path(__file__).parent / "migrations"


def make_engine(
    url: str, *, pool_size: int = 10, connect_timeout: int | None = None
) -> AsyncEngine:
    """An async engine (psycopg 3) for ``postgresql+psycopg://`` URLs; ``connect_timeout``
    (seconds, at least 2) bounds each new connection."""
    connect_args = {} if connect_timeout is None else {"connect_timeout": connect_timeout}
    engine = create_async_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size * 2,
        pool_pre_ping=False,
        connect_args=connect_args,
    )
    event.listen(engine.sync_engine, "begin", _opens_its_own)
    return engine


def _opens_its_own(connection: Any) -> None:
    """A transaction SQLAlchemy begins is opened by psycopg's own ``BEGIN`` (or by
    ``_pipeline``'s): a connection ``_pipeline`` left in autocommit, its transaction over,
    is taken out of it first."""
    dbapi_connection = connection.connection.dbapi_connection
    if dbapi_connection is not None and dbapi_connection.autocommit:
        dbapi_connection.autocommit = False


def make_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


def upgrade(url: str, revision: str = "head") -> None:
    """Run Alembic migrations up to ``revision`` (synchronously, as the owner role)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
    finally:
        engine.dispose()


def table_of(model: Any) -> Table:
    """A mapped class's table, typed as one (declarative mapping types it as a FromClause).
    Statements on the table skip the ORM's per-row work: the hot paths build them once."""
    table = model.__table__
    assert isinstance(table, Table)
    return table


def storable(value: str) -> bool:
    """Text Postgres can hold: no NUL, no lone surrogate."""
    if "\x00" in value:
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


async def pipelined(
    session: AsyncSession, statements: Sequence[tuple[str, Mapping[str, Any]]]
) -> list[tuple[Any, ...] | None]:
    """The first row of each of ``statements`` (driver SQL, psycopg parameters), sent to
    Postgres in one round trip together with the transaction's ``BEGIN`` (psycopg's pipeline
    mode). For a transaction's opening statements: through SQLAlchemy, the ``BEGIN`` and
    each statement would wait for the one before, and on the hot paths a round trip to
    Postgres costs more than the statement.

    A failure is raised as SQLAlchemy raises a failed statement, and a connection Postgres
    dropped is not handed out again."""
    results = await _pipeline(session, statements, commit=False)
    return [rows[0] if rows else None for _, rows in results]


# A statement's result: its columns' names and all its rows.
Rows = tuple[list[str], list[tuple[Any, ...]]]


async def pipelined_rows(
    session: AsyncSession,
    statements: Sequence[tuple[str, Mapping[str, Any]]],
    *,
    commit: bool = False,
) -> list[Rows]:
    """``pipelined`` with every row of each statement and its columns' names. ``commit``:
    the transaction's ``COMMIT`` goes in the same round trip, so the transaction ends with
    it; the session's own commit after it sends nothing (psycopg commits only a connection
    in a transaction). A failed statement keeps the ``COMMIT`` from running: Postgres
    skips what follows it, and the session rolls the transaction back as after any failed
    statement."""
    return await _pipeline(session, statements, commit=commit)


COMMIT = "COMMIT"


BEGIN = "BEGIN"


async def _pipeline(
    session: AsyncSession, statements: Sequence[tuple[str, Mapping[str, Any]]], commit: bool
) -> list[Rows]:
    connection = await session.connection()
    raw = (await connection.get_raw_connection()).driver_connection
    assert isinstance(raw, psycopg.AsyncConnection), "Moat's engines are psycopg's"
    # A transaction's first statements: its BEGIN goes in the pipeline. psycopg's own would
    # be sent with a Sync of its own and waited for (a round trip, and a turn of the event
    # loop, before the statements go). So the connection is put in autocommit, where
    # psycopg sends none, and the pipeline opens the transaction itself; the statements
    # after it, and the session's commit or rollback, run in it as in any transaction.
    # Once it is over the connection leaves autocommit: here, when the pipeline committed;
    # else when SQLAlchemy begins its next transaction (``_opens_its_own``).
    # Only a plain BEGIN: a connection set to another isolation level, read-only or
    # deferrable keeps psycopg's.
    plain = raw.isolation_level is None and raw.read_only is None and raw.deferrable is None
    opens = plain and raw.info.transaction_status == pq.TransactionStatus.IDLE
    if opens and not raw.autocommit:
        await raw.set_autocommit(True)
    sql, params = statements[0]
    try:
        sent: list[tuple[str, Mapping[str, Any], bool | None]] = [
            (s, p, None) for s, p in statements
        ]
        if opens:
            sent.insert(0, (BEGIN, {}, False))
        if commit:
            # Never prepared: Postgres's statement statistics do not count a prepared
            # COMMIT's executions, and commits per execution are measured there.
            sent.append((COMMIT, {}, False))
        async with raw.pipeline():
            cursors = await _sent_together(raw, sent)
        if opens:
            cursors = cursors[1:]
        if commit:
            cursors = cursors[:-1]
        if raw.info.transaction_status == pq.TransactionStatus.IDLE:
            await raw.set_autocommit(False)  # committed: what follows opens its own
        encoding = raw.info.encoding
        return [
            (names, await cursor.fetchall())
            if (names := _column_names(cursor, encoding)) is not None
            else ([], [])
            for cursor in cursors
        ]
    except psycopg.Error as err:
        gone = raw.closed or raw.broken
        if gone:
            await connection.invalidate(err)
        raise DBAPIError.instance(
            sql, params, err, psycopg.Error, connection_invalidated=gone, dialect=connection.dialect
        ) from err


async def _sent_together(
    raw: psycopg.AsyncConnection[Any], sent: Sequence[tuple[str, Mapping[str, Any], bool | None]]
) -> list[psycopg.AsyncCursor[Any]]:
    """Each of ``sent`` (SQL, parameters, whether to prepare it) queued in the connection's
    pipeline, then all of them sent at once: one wait for the socket, where ``execute``
    for each would wait once each (a turn of the event loop a statement). What ``execute``
    does for a statement in a pipeline, in its order, for every statement."""
    pipeline = raw._pipeline
    assert pipeline is not None, "inside raw.pipeline()"
    cursors = [raw.cursor() for _ in sent]

    def queued() -> Any:
        for cursor, (sql, params, prepare) in zip(cursors, sent, strict=True):
            yield from cursor._start_query(sql)
            query = cursor._convert_query(sql, params)
            yield from cursor._maybe_prepare_gen(query, prepare=prepare)
            cursor._last_query = sql
            yield from raw._prepared.maintain_gen(raw)
        yield from pipeline._communicate_gen()

    async with raw.lock:
        await raw.wait(queued())
    return cursors


def _column_names(cursor: psycopg.AsyncCursor[Any], encoding: str) -> list[str] | None:
    """The names of the columns of a cursor's result; None when it has none (an INSERT
    without RETURNING, a SET, a ``SELECT`` of no column), as ``pipelined_rows`` answers.
    ``cursor.description`` tells the same, but builds a ``Column`` (type, size, modifier)
    for every column each time it is read: on the execute path, where an event's statement
    returns every column of each event it wrote, about a millisecond of a check."""
    result = cursor.pgresult
    if result is None or result.status != pq.ExecStatus.TUPLES_OK or not result.nfields:
        return None
    return [(result.fname(i) or b"").decode(encoding) for i in range(result.nfields)]


def engine_of(sessions: object) -> AsyncEngine | None:
    """The engine a sessionmaker's sessions are bound to; None when they are bound to
    anything else (a connection, a stand-in)."""
    kw = getattr(sessions, "kw", None)
    bind = kw.get("bind") if isinstance(kw, dict) else None
    return bind if isinstance(bind, AsyncEngine) else None


class DriverStatement:
    """A SQLAlchemy statement compiled once for psycopg, to be sent past SQLAlchemy
    (``pipelined``): its text with psycopg's parameters (``sql``), and the parameters of
    one execution bound as SQLAlchemy binds them (``params``). The hot paths send their
    statements this way to put several in one round trip, and to skip SQLAlchemy's
    per-execution work (cache key, result handling)."""

    def __init__(self, statement: ClauseElement) -> None:
        compiled = statement.compile(dialect=_DIALECT)
        assert isinstance(compiled, SQLCompiler)
        self.sql = compiled.string
        self._compiled = compiled
        self._processors: Mapping[str, Any] = compiled._bind_processors

    def params(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The statement's parameters for ``values`` (by bind name): every one it needs,
        fixed ones included, each converted as its column type says."""
        bound = dict(self._compiled.construct_params(dict(values)))
        for name, process in self._processors.items():
            value = bound.get(name)
            if value is not None:
                bound[name] = process(value)
        return bound


_DIALECT = PGDialectAsync_psycopg()  # type: ignore[no-untyped-call]
