"""A replay is answered from Postgres alone: no Temporal call (it works with Temporal
stopped) and no write per request. Hits are counted in the gateway's memory and added to
one row per execution in batches; a clean shutdown flushes what is counted, and a failed
flush keeps its counts for the next."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from sqlalchemy import event, func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.testing import WorkflowEnvironment

from schemas.names import REPLAYED_HEADER
from starter.devstack import serve_asgi
from starter.devstack.temporal import TEMPORAL_DYNAMIC_CONFIG, temporal_binary
from starter.gateway.app import create_app
from starter.runtime.codec import data_converter
from starter.service.executions.hits import HitLedger
from store import hits, make_engine, make_sessionmaker, tenancy
from store.models import IdempotentHitRow, PolicyDecisionRow
from tests.support.stack import NAMESPACE, Stack, StackFactory


async def _hits(sessions: async_sessionmaker[AsyncSession], tenant_id: str, receipt: str) -> int:
    async with tenancy.tenant_transaction(sessions, tenant_id) as session:
        return await hits.hits_of(session, tenant_id, receipt)


async def test_a_replay_is_answered_with_temporal_stopped(
    stack: Stack, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    first = await stack.execute("demo.echo", {"n": 1}, key="stored")
    assert first.status_code == 200, first.text
    receipt_id = first.json()["receipt_id"]
    # A gateway of its own on a Temporal server of its own, which is then stopped: any
    # Temporal call the replay made would fail. Its flush interval outlasts the test, so
    # the hits reach Postgres only through the shutdown's flush.
    env = await WorkflowEnvironment.start_local(
        namespace=NAMESPACE,
        data_converter=data_converter(stack.settings),
        dev_server_existing_path=str(temporal_binary()),
        dev_server_extra_args=TEMPORAL_DYNAMIC_CONFIG,
    )
    settings = stack.settings.model_copy(update={"hit_flush_seconds": 3600.0})
    app = create_app(settings, client=env.client, sessions=app_sessions)
    await env.shutdown()
    headers = {"Authorization": f"Bearer {stack.api_key}", "Idempotency-Key": "stored"}
    body = {"schema_version": "1", "capability_id": "demo.echo", "input": {"n": 1}}
    async with serve_asgi(app) as url, httpx.AsyncClient(timeout=30) as http:
        for _ in range(3):
            replay = await http.post(f"{url}/v1/executions", json=body, headers=headers)
            assert replay.status_code == 200, replay.text
            assert replay.headers[REPLAYED_HEADER] == "true"
            assert replay.json()["receipt_id"] == receipt_id
            assert replay.json()["output"] == first.json()["output"]
        assert await _hits(app_sessions, stack.tenant_id, receipt_id) == 0
    assert await _hits(app_sessions, stack.tenant_id, receipt_id) == 3


async def test_replays_add_to_one_counter_and_no_policy_decision(
    make_stack: StackFactory, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    async with make_stack(hit_flush_seconds=0.05) as stack:
        first = await stack.execute("demo.echo", {"n": 2}, key="counted")
        receipt_id = first.json()["receipt_id"]

        async def decisions() -> int:
            async with stack.sessions() as session:
                count = await session.scalar(
                    select(func.count())
                    .select_from(PolicyDecisionRow)
                    .where(PolicyDecisionRow.receipt_id == receipt_id)
                )
                return count or 0

        before = await decisions()
        replays = await asyncio.gather(
            *(stack.execute("demo.echo", {"n": 2}, key="counted") for _ in range(5))
        )
        assert all(r.headers[REPLAYED_HEADER] == "true" for r in replays)
        for _ in range(600):  # the next flushes (every 0.05 s) bring the counter to 5
            if await _hits(app_sessions, stack.tenant_id, receipt_id) >= 5:
                break
            await asyncio.sleep(0.05)
        assert await _hits(app_sessions, stack.tenant_id, receipt_id) == 5
        assert await decisions() == before
        async with stack.sessions() as session:
            rows = (
                await session.scalars(
                    select(IdempotentHitRow).where(IdempotentHitRow.receipt_id == receipt_id)
                )
            ).all()
        assert [(r.hits, r.idempotency_key, r.capability_id) for r in rows] == [
            (5, "counted", "demo.echo")
        ]
        assert rows[0].first_hit_at <= rows[0].last_hit_at


async def test_a_failed_flush_keeps_its_counts(
    stack: Stack, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    receipt_id = str(uuid.uuid4())
    now = datetime.now(UTC)
    unreachable = make_engine("postgresql+psycopg://nobody@127.0.0.1:1/none", pool_size=1)
    try:
        down = HitLedger(make_sessionmaker(unreachable))
        down.note(stack.tenant_id, receipt_id, "demo.echo", "k", now)
        down.note(stack.tenant_id, receipt_id, "demo.echo", "k", now)
        with pytest.raises(Exception, match=r"127\.0\.0\.1"):
            await down.flush()
        assert down.pending == 2
    finally:
        await unreachable.dispose()
    up = HitLedger(app_sessions)
    up.note(stack.tenant_id, receipt_id, "demo.echo", "k", now)
    assert await up.flush() == 1
    up.note(stack.tenant_id, receipt_id, "demo.echo", "k", now)
    assert await up.flush() == 1
    assert await _hits(app_sessions, stack.tenant_id, receipt_id) == 2


async def test_one_flush_adds_to_many_counters_keeping_the_first_and_last_hit(
    stack: Stack, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    receipts = []
    for n in range(3):
        done = await stack.execute("demo.echo", {"n": n}, key=f"batch-{n}")
        receipts.append(done.json()["receipt_id"])

    def at(second: int) -> datetime:
        return datetime(2026, 1, 1, 0, 0, second, tzinfo=UTC)

    def batch(count: int, first: int, last: int) -> list[hits.Hits]:
        return [
            hits.Hits(stack.tenant_id, r, "demo.echo", f"batch-{i}", count, at(first), at(last))
            for i, r in enumerate(receipts)
        ]

    statements: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, params: Any, ctx: Any, many: bool) -> None:
        if "idempotent_hits" in statement:  # a driver's executemany: a statement per row
            rows = len(params) if many and isinstance(params, list | tuple) else 1
            statements.extend([statement] * rows)

    engine = app_sessions.kw["bind"].sync_engine
    event.listen(engine, "before_cursor_execute", count)
    try:
        for rows in (batch(2, 10, 20), batch(3, 5, 15), batch(1, 30, 40)):
            async with tenancy.tenant_transaction(app_sessions, stack.tenant_id) as session:
                await hits.add_hits(session, rows)
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert len(statements) == 3  # one statement a flush, however many executions it carries
    async with stack.sessions() as session:
        kept = (
            await session.scalars(
                select(IdempotentHitRow).where(IdempotentHitRow.receipt_id.in_(receipts))
            )
        ).all()
    assert sorted((r.receipt_id, r.hits, r.first_hit_at, r.last_hit_at) for r in kept) == sorted(
        (r, 6, at(5), at(40)) for r in receipts
    )
