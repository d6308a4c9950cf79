"""``events.append_committing``: a transaction's BEGIN, tenant, events and COMMIT in one round
trip, written exactly as ``append`` writes them; a batch partly in the log, or a failing
statement, commits nothing."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
import pytest
from sqlalchemy import event as sa_event
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from activities.evidence import Chain
from schemas.events import AggregateType, EventDraft, EventType, RunStatus
from schemas.ids import uuid7
from store import db, tenancy, tenants
from store import events as event_log


@pytest.fixture
async def tenant_id(sessions: async_sessionmaker[AsyncSession]) -> str:
    async with sessions.begin() as session:
        return (await tenants.create_tenant(session, f"ec-{uuid.uuid4().hex[:8]}")).id


class RoundTrips:
    """What the app role's engine sends: statements through SQLAlchemy, pipelines, and the
    COMMITs psycopg actually sends (a connection already committed sends none)."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], mp: pytest.MonkeyPatch):
        self.statements = 0
        self.pipelines: list[int] = []
        self.commits_sent = 0
        self.engine = sessions.kw["bind"].sync_engine
        sa_event.listen(self.engine, "before_cursor_execute", self._statement)
        sa_event.listen(self.engine, "commit", self._commit)
        original = db.pipelined_rows

        async def counted(
            session: AsyncSession, sent: Sequence[tuple[str, Mapping[str, Any]]], **kw: Any
        ) -> list[db.Rows]:
            self.pipelines.append(len(sent))
            return await original(session, sent, **kw)

        mp.setattr(db, "pipelined_rows", counted)

    def _statement(self, *args: Any) -> None:
        self.statements += 1

    def _commit(self, conn: Any) -> None:
        raw = conn.connection.driver_connection
        if raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            self.commits_sent += 1

    def close(self) -> None:
        sa_event.remove(self.engine, "before_cursor_execute", self._statement)
        sa_event.remove(self.engine, "commit", self._commit)


@pytest.fixture
def trips(app_sessions: async_sessionmaker[AsyncSession], monkeypatch: pytest.MonkeyPatch) -> Any:
    counter = RoundTrips(app_sessions, monkeypatch)
    yield counter
    counter.close()


def _chain(tenant_id: str, receipt_id: str, run_id: str, **kw: Any) -> Chain:
    return Chain(tenant_id, receipt_id, run_id, "moat.test", **kw)


async def test_one_round_trip_writes_what_append_writes(
    tenant_id: str,
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
    trips: RoundTrips,
) -> None:
    receipt_id, run_id = str(uuid7()), str(uuid7())
    started = _chain(tenant_id, receipt_id, run_id)
    started.add(EventType.RUN_STARTED, AggregateType.RUN, receipt_id, workflow_id="wf-ec")
    started.add(EventType.POLICY_EVALUATED, AggregateType.POLICY, f"{receipt_id}:policy")
    async with app_sessions.begin() as s:
        first = await event_log.append_committing(s, started.drafts, scope=tenant_id)
    later = _chain(tenant_id, receipt_id, run_id, cause_from_log=True)
    later.add(EventType.STEP_STARTED, AggregateType.STEP, f"{receipt_id}:adapter")
    later.add(EventType.TOOL_CALLED, AggregateType.STEP, f"{receipt_id}:adapter")
    async with app_sessions.begin() as s:
        second = await event_log.append_committing(
            s, later.drafts, scope=tenant_id, first_cause_from_log=True
        )
    # Two transactions, each one pipeline (tenant and events, COMMIT inside) and nothing else.
    assert (trips.pipelines, trips.statements, trips.commits_sent) == ([2, 2], 0, 0)
    assert [e.id for e in first + second] == [d.id for d in started.drafts + later.drafts]
    assert second[0].causation_id == first[-1].id
    async with sessions() as s:
        logged = await event_log.events_of(s, tenant_id, receipt_id)
        state = await event_log.get_run(s, tenant_id, receipt_id)
        rebuilt = await event_log.rebuild(s, tenant_id)
    assert logged == first + second
    assert state is not None and rebuilt[receipt_id] == state
    assert state.status == RunStatus.RUNNING and state.total_steps == 1
    assert state.last_sequence == logged[-1].sequence_number


async def test_a_batch_partly_in_the_log_writes_nothing(
    tenant_id: str,
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
) -> None:
    receipt_id, run_id = str(uuid7()), str(uuid7())
    chain = _chain(tenant_id, receipt_id, run_id)
    chain.add(EventType.RUN_STARTED, AggregateType.RUN, receipt_id, workflow_id="wf-ec")
    chain.add(EventType.STEP_STARTED, AggregateType.STEP, f"{receipt_id}:adapter")
    async with app_sessions.begin() as s:
        await tenancy.set_tenant(s, tenant_id)
        await event_log.append(s, chain.drafts[:1])
    with pytest.raises(event_log.PartialAppend):
        async with app_sessions.begin() as s:
            await event_log.append_committing(s, chain.drafts, scope=tenant_id)
    async with sessions() as s:
        logged = await event_log.events_of(s, tenant_id, receipt_id)
        before = await event_log.get_run(s, tenant_id, receipt_id)
    assert before is not None and before.last_sequence == logged[0].sequence_number
    # What the callers do then: ``append``, which moves the run by the event it writes.
    async with app_sessions.begin() as s:
        await tenancy.set_tenant(s, tenant_id)
        assert len(await event_log.append(s, chain.drafts)) == 1
    async with sessions() as s:
        state = await event_log.get_run(s, tenant_id, receipt_id)
        rebuilt = await event_log.rebuild(s, tenant_id)
    assert len(logged) == 1 and state is not None and rebuilt[receipt_id] == state
    assert state.last_sequence > before.last_sequence
    # Every draft already there: nothing written, and nothing to refuse.
    async with app_sessions.begin() as s:
        assert await event_log.append_committing(s, chain.drafts, scope=tenant_id) == []


async def test_a_failing_statement_commits_nothing(
    tenant_id: str,
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
) -> None:
    receipt_id, run_id = str(uuid7()), str(uuid7())
    chain = _chain(tenant_id, receipt_id, run_id)
    chain.add(EventType.RUN_STARTED, AggregateType.RUN, receipt_id, workflow_id="wf-ec")
    chain.add(EventType.STEP_STARTED, AggregateType.STEP, f"{receipt_id}:adapter", bad="\x00")
    with pytest.raises(DBAPIError):
        async with app_sessions.begin() as s:
            await event_log.append_committing(s, chain.drafts, scope=tenant_id)
    # Another tenant's events: row-level security refuses them.
    other = _chain(tenant_id, str(uuid7()), run_id)
    other.add(EventType.RUN_STARTED, AggregateType.RUN, other.receipt_id, workflow_id="wf-ec")
    with pytest.raises(DBAPIError):
        async with app_sessions.begin() as s:
            await event_log.append_committing(s, other.drafts, scope="no-such-tenant")
    async with sessions() as s:
        assert await event_log.events_of(s, tenant_id, receipt_id) == []
        assert await event_log.events_of(s, tenant_id, other.receipt_id) == []
        assert await event_log.get_run(s, tenant_id, receipt_id) is None
    # The connections went back to the pool usable: the next transaction writes.
    for _ in range(3):
        fine = _chain(tenant_id, str(uuid7()), run_id)
        fine.add(EventType.RUN_STARTED, AggregateType.RUN, fine.receipt_id, workflow_id="w")
        async with app_sessions.begin() as s:
            assert len(await event_log.append_committing(s, fine.drafts, scope=tenant_id)) == 1


async def test_announcing_events_are_appended_and_committed_by_the_session(
    tenant_id: str,
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
    trips: RoundTrips,
) -> None:
    receipt_id, run_id = str(uuid7()), str(uuid7())
    chain = _chain(tenant_id, receipt_id, run_id)
    chain.add(EventType.RUN_STARTED, AggregateType.RUN, receipt_id, workflow_id="wf-ec")
    chain.add(EventType.RUN_FAILED, AggregateType.RUN, receipt_id, error_code="x")
    drafts: list[EventDraft] = chain.drafts
    async with app_sessions.begin() as s:
        written = await event_log.append_committing(s, drafts, scope=tenant_id)
    assert len(written) == 2
    assert trips.commits_sent == 1  # the session's, after ``announce`` had its say
    async with sessions() as s:
        state = await event_log.get_run(s, tenant_id, receipt_id)
    assert state is not None and state.status == RunStatus.FAILED
