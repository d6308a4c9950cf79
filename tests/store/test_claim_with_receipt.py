"""``idempotency.CLAIM_WITH_RECEIPT``: a key's claim and its holder's receipt in one
statement, answering as ``claim_key`` followed by the receipt's read does, concurrent
claims included."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store import db, idempotency, receipts, tenancy, tenants
from store.idempotency import Claim
from tests.support.stack import Stack


@pytest.fixture
async def tenant_id(sessions: async_sessionmaker[AsyncSession]) -> str:
    async with sessions.begin() as session:
        return (await tenants.create_tenant(session, f"cr-{uuid.uuid4().hex[:8]}")).id


def _params(tenant_id: str, key: str, receipt_id: str, now: datetime, ttl: int = 60) -> dict:
    return idempotency.claim_params(
        tenant_id=tenant_id,
        key=key,
        receipt_id=receipt_id,
        input_hash="h",
        workflow_id=f"wf-{receipt_id}",
        now=now,
        ttl_seconds=ttl,
    )


async def _claim(
    session: AsyncSession, tenant_id: str, key: str, receipt_id: str, now: datetime, ttl: int = 60
) -> tuple[Claim, object] | None:
    rows = await db.pipelined(
        session,
        [
            (tenancy.SET_TENANT, {"tenant": tenant_id}),
            (idempotency.CLAIM_WITH_RECEIPT, _params(tenant_id, key, receipt_id, now, ttl)),
        ],
    )
    return idempotency.claimed(rows[1])


async def test_taken_held_and_re_armed_as_claim_key_answers(
    tenant_id: str, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    now = datetime.now(UTC)
    async with app_sessions.begin() as s:
        first = await _claim(s, tenant_id, "k", "r1", now, ttl=10)
    assert first is not None and first[1] is None
    assert (first[0].receipt_id, first[0].taken_now) == ("r1", True)
    async with app_sessions.begin() as s:  # a retried check: its own claim, not taken now
        again = await _claim(s, tenant_id, "k", "r1", now)
    assert again is not None and (again[0].receipt_id, again[0].taken_now) == ("r1", False)
    assert again[0].expires_at == now + timedelta(seconds=10)
    async with app_sessions.begin() as s:  # another execution: the holder comes back
        other = await _claim(s, tenant_id, "k", "r2", now)
    assert other is not None and (other[0].receipt_id, other[0].taken_now) == ("r1", False)
    later = now + timedelta(seconds=11)
    async with app_sessions.begin() as s:  # expired: re-armed for the new execution
        re_armed = await _claim(s, tenant_id, "k", "r2", later)
    assert re_armed is not None and (re_armed[0].receipt_id, re_armed[0].taken_now) == ("r2", True)
    assert re_armed[0].first_seen_at == later
    async with app_sessions.begin() as s:
        await tenancy.set_tenant(s, tenant_id)
        assert (await idempotency.holder(s, tenant_id, "k")).receipt_id == "r2"


async def test_a_claim_committed_while_waiting_is_read_on_its_own(
    tenant_id: str, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    """The claim waited for a concurrent one to commit, which its statement cannot see: no
    row, and ``holder`` reads the one that won."""
    now = datetime.now(UTC)
    async with app_sessions.begin() as first:
        await _claim(first, tenant_id, "race", "r1", now)
        async with app_sessions.begin() as second:
            waiting = asyncio.create_task(_claim(second, tenant_id, "race", "r2", now))
            await asyncio.sleep(0.3)
            assert not waiting.done()
            await first.commit()
            assert await waiting is None
            assert (await idempotency.holder(second, tenant_id, "race")).receipt_id == "r1"


async def test_a_re_arm_committed_while_waiting_is_the_holder_read(
    tenant_id: str, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    """An expired claim re-armed by a concurrent check: the holder read is the re-armed
    claim, not the expired one the statement's snapshot holds."""
    now = datetime.now(UTC)
    async with app_sessions.begin() as s:
        await _claim(s, tenant_id, "re", "old", now - timedelta(seconds=120))
    async with app_sessions.begin() as first:
        taken = await _claim(first, tenant_id, "re", "new", now)
        assert taken is not None and taken[0].taken_now
        async with app_sessions.begin() as second:
            waiting = asyncio.create_task(_claim(second, tenant_id, "re", "third", now))
            await asyncio.sleep(0.3)
            assert not waiting.done()
            await first.commit()
            found = await waiting
    assert found is not None and found[1] is None
    assert (found[0].receipt_id, found[0].taken_now) == ("new", False)


async def test_a_recorded_holder_comes_back_with_its_receipt(
    stack: Stack, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    resp = await stack.execute("demo.echo", {"message": "held"}, key=f"cr-{uuid.uuid4().hex}")
    assert resp.status_code == 200, resp.text
    receipt = resp.json()["receipt"]
    async with app_sessions.begin() as s:
        found = await _claim(
            s, stack.tenant_id, receipt["idempotency_key"], "another", datetime.now(UTC)
        )
        await tenancy.set_tenant(s, stack.tenant_id)
        read = await receipts.get_receipt(s, stack.tenant_id, receipt["id"])
    assert found is not None and read is not None
    assert (found[0].receipt_id, found[0].taken_now) == (receipt["id"], False)
    assert found[1] == read
