"""Held reads: a few connections of the application role kept out of the pool for the hot
path's one-statement reads, each scoped to the tenant it last read for.

A read through a session pays for the session, its ``BEGIN`` and ``COMMIT`` and the pool's
check-out and check-in, and a read that must first scope its transaction to a tenant pays
for a second statement in the same round trip. On a held connection the tenant is scoped
for the session (``set_config(..., false)``) and stays so while it reads for that tenant:
each read is one statement, run in autocommit (Postgres commits it as a transaction of its
own), and row-level security applies to it as to any statement of the role. Reading for
another tenant scopes the connection to that one first. A read is a prepared statement of
its connection from its first run (parsed and planned once per connection, not once per
read): a held connection is never behind a pooler (held reads are off there).

What keeps a session-wide scope from reaching anything else:
- a held connection runs only reads given to ``HeldReads.read``, and never goes back to
  the pool: it is closed when dropped (on any failure or cancellation, or ``close``);
- every read must lead with the tenant it ran scoped to (``SCOPE``), which ``read``
  checks: a read that ran scoped to another tenant is never returned.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

# A held read's first column: the tenant the statement ran scoped to.
SCOPE = "current_setting('moat.tenant_id', true)"
_SCOPE_SESSION = "SELECT set_config('moat.tenant_id', %(tenant)s, false)"
DEFAULT_SIZE = 4


class _Held:
    def __init__(self, raw: psycopg.AsyncConnection[Any]) -> None:
        self.raw = raw
        self.tenant: str | None = None  # scoped to, for the session
        # Every read's cursor: one read at a time on a held connection, and a cursor made
        # for each read (its adapters copied from the connection's) costs more than the
        # read's own rows.
        self.cursor = raw.cursor()


class HeldReads:
    """Up to ``size`` held connections of ``engine``'s, opened as reads need them."""

    def __init__(self, engine: AsyncEngine, size: int = DEFAULT_SIZE) -> None:
        self.engine = engine
        self._size = size
        self._idle: list[_Held] = []
        self._open = 0
        self._closed = False

    async def read(
        self, tenant_id: str, sql: str, params: Mapping[str, Any]
    ) -> tuple[Any, ...] | None:
        """The one row of ``sql`` (driver SQL leading with ``SCOPE``), read scoped to
        ``tenant_id``; None when it was not read here (read it otherwise): every held
        connection busy, the connection lost (Postgres restarted, say), or the read not
        scoped to ``tenant_id``. The connection is dropped after anything but a read in
        scope.

        Any other failure is raised as SQLAlchemy raises a failed statement."""
        held = await self._take()
        if held is None:
            return None
        row = None
        try:
            row = await self._read(held, tenant_id, sql, params)
        finally:
            in_scope = row is not None and row[0] == tenant_id
            if in_scope and not self._closed:
                self._idle.append(held)
            else:
                await self._drop(held)
        return row if in_scope else None

    async def _read(
        self, held: _Held, tenant_id: str, sql: str, params: Mapping[str, Any]
    ) -> tuple[Any, ...] | None:
        raw = held.raw
        try:
            if held.tenant != tenant_id:
                held.tenant = None
                await raw.execute(_SCOPE_SESSION, {"tenant": tenant_id})
                held.tenant = tenant_id
            cursor = held.cursor
            await cursor.execute(sql, params, prepare=True)
            row: tuple[Any, ...] | None = await cursor.fetchone()
        except psycopg.OperationalError:
            return None
        except psycopg.Error as err:
            raise DBAPIError.instance(
                sql,
                params,
                err,
                psycopg.Error,
                connection_invalidated=True,
                dialect=self.engine.dialect,
            ) from err
        return row

    async def _take(self) -> _Held | None:
        if self._idle:
            return self._idle.pop()
        if self._open >= self._size or self._closed:
            return None
        self._open += 1
        try:
            pooled = await self.engine.raw_connection()
        except BaseException:
            self._open -= 1
            raise
        raw = pooled.driver_connection
        pooled.detach()  # never back to the pool: closed when dropped
        assert isinstance(raw, psycopg.AsyncConnection), "Moat's engines are psycopg's"
        held = _Held(raw)
        try:
            await raw.set_autocommit(True)
        except BaseException:
            await self._drop(held)
            raise
        return held

    async def _drop(self, held: _Held) -> None:
        self._open -= 1
        held.tenant = None
        await held.raw.close()

    async def close(self) -> None:
        """Close every held connection (the process is stopping)."""
        self._closed = True
        while self._idle:
            await self._drop(self._idle.pop())
