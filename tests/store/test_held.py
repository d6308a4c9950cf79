"""Held reads: connections kept out of the pool, each scoped for its session to the tenant
it last read for, read only under row-level security, and never handed to anything else."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from starter.service import approvals as approvals_service
from starter.service import policy as policy_service
from store import approvals, db, policy_versions, tenancy, tenants
from store.held import SCOPE, HeldReads
from store.models import ApprovalRow

# The tenants the read sees (row-level security: its own only).
SEEN = f"SELECT {SCOPE}, array(SELECT id FROM tenants ORDER BY id), %(marker)s::text"


def _engine(app_sessions: async_sessionmaker[AsyncSession]) -> AsyncEngine:
    engine = db.engine_of(app_sessions)
    assert engine is not None
    return engine


async def _tenants(sessions: async_sessionmaker[AsyncSession], n: int) -> list[str]:
    async with sessions.begin() as session:
        made = [
            await tenants.create_tenant(session, f"held-{uuid.uuid4().hex[:10]}") for _ in range(n)
        ]
    return [t.id for t in made]


async def test_a_held_read_sees_its_tenant_only_and_switches_tenants(
    sessions: async_sessionmaker[AsyncSession], app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    a, b = await _tenants(sessions, 2)
    reads = HeldReads(_engine(app_sessions), size=1)  # one connection, switched between them
    try:
        for tenant in (a, b, b, a):
            row = await reads.read(tenant, SEEN, {"marker": "seen"})
            assert row is not None
            assert row[:2] == (tenant, [tenant])
    finally:
        await reads.close()


async def test_held_connections_never_reach_the_pool(
    sessions: async_sessionmaker[AsyncSession], app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    [a] = await _tenants(sessions, 1)
    reads = HeldReads(_engine(app_sessions), size=3)
    try:
        rows = await asyncio.gather(*(reads.read(a, SEEN, {"marker": "pool"}) for _ in range(3)))
        assert all(row is not None and row[0] == a for row in rows)
        # Every connection the pool hands out meanwhile is unscoped: it sees no tenant.
        held = [await app_sessions().__aenter__() for _ in range(5)]
        try:
            for session in held:
                scope, seen = (
                    await session.execute(text(f"SELECT {SCOPE}, (SELECT count(*) FROM tenants)"))
                ).one()
                assert (scope or "", seen) == ("", 0)
        finally:
            for session in held:
                await session.close()
    finally:
        await reads.close()


async def test_a_read_outside_its_scope_is_not_returned(
    sessions: async_sessionmaker[AsyncSession], app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    a, b = await _tenants(sessions, 2)
    reads = HeldReads(_engine(app_sessions), size=1)
    try:
        # A statement that says it ran for another tenant is never taken as this one's.
        assert await reads.read(a, "SELECT %(other)s::text, 1", {"other": b}) is None
        row = await reads.read(a, SEEN, {"marker": "after"})
        assert row is not None and row[:2] == (a, [a])
    finally:
        await reads.close()


async def test_busy_lost_and_closed_connections_are_read_otherwise(
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
    engine: AsyncEngine,
) -> None:
    [a] = await _tenants(sessions, 1)
    reads = HeldReads(_engine(app_sessions), size=1)
    try:
        slow = f"SELECT {SCOPE}, pg_sleep(0.5)"
        first, second = await asyncio.gather(
            reads.read(a, slow, {}), reads.read(a, SEEN, {"marker": "busy"})
        )
        assert first is not None and second is None  # the one connection was busy

        assert await reads.read(a, SEEN, {"marker": "lost"}) is not None
        async with engine.connect() as owner:  # Postgres drops the held connection
            ended = await owner.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE query LIKE '%array(SELECT id FROM tenants%'"
                    " AND pid <> pg_backend_pid()"
                )
            )
            assert any(ended.scalars())
        assert await reads.read(a, SEEN, {"marker": "gone"}) is None
        again = await reads.read(a, SEEN, {"marker": "again"})  # a new connection
        assert again is not None and again[:2] == (a, [a])
    finally:
        await reads.close()
    assert await reads.read(a, SEEN, {"marker": "closed"}) is None


async def test_a_failed_read_drops_its_connection(
    sessions: async_sessionmaker[AsyncSession], app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    [a] = await _tenants(sessions, 1)
    reads = HeldReads(_engine(app_sessions), size=1)
    try:
        try:
            await reads.read(a, f"SELECT {SCOPE}, 1 / 0", {})
        except Exception as err:
            assert isinstance(err.__cause__, psycopg.errors.DivisionByZero)
        else:
            raise AssertionError("a failed read raises")
        row = await reads.read(a, SEEN, {"marker": "fresh"})
        assert row is not None and row[:2] == (a, [a])
    finally:
        await reads.close()


async def test_a_held_read_is_prepared_from_its_first_run(
    sessions: async_sessionmaker[AsyncSession], app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    """Parsed and planned once per connection: the first read already runs as a prepared
    statement of its session (``pg_prepared_statements`` lists it while it runs)."""
    [a] = await _tenants(sessions, 1)
    mine = f"SELECT {SCOPE}, (SELECT count(*) FROM pg_prepared_statements), %(marker)s::text"
    reads = HeldReads(_engine(app_sessions), size=1)
    try:
        for _ in range(2):
            row = await reads.read(a, mine, {"marker": "prepared"})
            assert row is not None and row[:2] == (a, 1)
    finally:
        await reads.close()


async def test_a_held_read_of_strictness_says_what_a_transaction_says(
    sessions: async_sessionmaker[AsyncSession], app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    """The wait for a run reads whether the tenant's policy is strict in one held statement:
    the mode of its newest document, its own tenant's only, else its mode from before it had
    documents, as ``is_strict`` reads it in a transaction."""
    a, b = await _tenants(sessions, 2)
    reads = HeldReads(_engine(app_sessions), size=1)

    async def both(tenant: str, legacy: str) -> tuple[bool | None, bool]:
        held = await policy_service.is_strict_held(reads, tenant, legacy)
        async with tenancy.tenant_transaction(app_sessions, tenant) as session:
            return held, await policy_service.is_strict(session, tenant, legacy)

    async def add(tenant: str, mode: str) -> None:
        async with sessions.begin() as session:
            await policy_versions.add(session, tenant, mode, {"mode": mode, "rules": []}, "t")

    try:
        assert await both(a, "standard") == (False, False)  # no document: the old mode
        assert await both(a, "strict") == (True, True)
        await add(b, "strict")  # another tenant's document is not a's
        assert await both(a, "standard") == (False, False)
        assert await both(b, "standard") == (True, True)
        await add(b, "standard")  # the newest document is the one in force
        assert await both(b, "strict") == (False, False)
    finally:
        await reads.close()
    assert await policy_service.is_strict_held(reads, a, "strict") is None  # not read: closed


async def test_a_held_read_of_an_awaited_approval_says_what_a_transaction_says(
    sessions: async_sessionmaker[AsyncSession], app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    """A strict tenant's wait looks at whether the run waits for an approval in one held
    statement: a pending approval of that run, of its own tenant, as ``pending_of_workflow``
    finds it in a transaction; a decided one is awaited no more."""
    a, b = await _tenants(sessions, 2)
    workflow = f"exec/{a}/{uuid.uuid4().hex}"
    reads = HeldReads(_engine(app_sessions), size=1)

    async def both(tenant: str, workflow_id: str) -> tuple[bool | None, bool]:
        held = await approvals_service.awaits_approval_held(reads, tenant, workflow_id)
        async with tenancy.tenant_transaction(app_sessions, tenant) as session:
            found = await approvals_service.pending_of_workflow(session, tenant, workflow_id)
        return held, found is not None

    now = datetime.now(UTC)
    row = ApprovalRow(
        id=f"apr_{uuid.uuid4().hex}",
        tenant_id=a,
        receipt_id=str(uuid.uuid4()),
        workflow_id=workflow,
        status="pending",
        capability_id="demo.echo",
        capability_version="1.0.0",
        input_hash="sha256:" + "0" * 64,
        policy_version=1,
        requested_by="key-1",
        allow_self_approval=False,
        input_key_id="k",
        input_sealed=b"sealed",
        requested_at=now,
        expires_at=now + timedelta(hours=1),
    )
    try:
        assert await both(a, workflow) == (False, False)  # none yet
        async with sessions.begin() as session:
            stored, _ = await approvals.request(session, row)
        assert await both(a, workflow) == (True, True)
        assert await both(a, workflow + "/other") == (False, False)
        assert await both(b, workflow) == (False, False)  # another tenant's run is not b's
        async with sessions.begin() as session:
            stored = await session.merge(stored)
            decided = {"decided_by": "p", "decided_at": now, "comment": None, "digest": None}
            await approvals.decide(session, stored, "approved", **decided)
        assert await both(a, workflow) == (False, False)
    finally:
        await reads.close()
