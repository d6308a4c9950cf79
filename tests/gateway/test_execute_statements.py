"""What one execution costs the database: the SQL statements, commits and round trips its
activities send, counted on the worker's engine (the statements ``store.db.pipelined`` and
``store.db.pipelined_rows`` send past SQLAlchemy included). A change that adds a round trip
to the execute path fails here."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
import pytest
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from temporalio import activity
from temporalio.api.enums.v1 import EventType

import worker as worker_module
from moat.testing.stack import StackFactory
from schemas.names import CALL_ADAPTER, CHECK_POLICY
from schemas.run import PolicyOutcome
from store import db
from workflows.execute import PATHS_VERSION

# The worker's share of a fresh successful execution: the policy check (tenant and policy
# document, key claim, receipt, budget, decision, events with the adapter's first attempt's
# start), and the record the successful attempt writes itself (receipt with outcome, leaf,
# kept answer, budget use and the tenant's webhook subscriptions; manifest index with leaf;
# events), each transaction's tenant set first. The attempt writes nothing before its call.
WORKER_STATEMENTS = 10
WORKER_COMMITS = 2
# Round trips: one per pipeline (with its BEGIN, and its COMMIT when it sends one), one per
# statement outside a pipeline (one more when psycopg sends the BEGIN before it), one per
# COMMIT psycopg sends; by activity. The adapter attempt's are its record's two: the run has
# no record step of its own.
WORKER_ROUND_TRIPS = {CHECK_POLICY: 2, CALL_ADAPTER: 2}
# A worker that has checked the tenant's capability before decides the next check ahead of
# its reads (``PolicyStep._ahead``): one round trip, with one statement more, the
# expectation of what it reads (``store.policy.EXPECTED``).
WARM_STATEMENTS = WORKER_STATEMENTS + 1
WARM_ROUND_TRIPS = {CHECK_POLICY: 1, CALL_ADAPTER: 2}


async def test_a_fresh_execution_sends_its_known_statements(
    make_stack: StackFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    engines: list[AsyncEngine] = []
    make_engine = worker_module.make_engine

    def captured(url: str, **kwargs: Any) -> AsyncEngine:
        engines.append(make_engine(url, **kwargs))
        return engines[-1]

    monkeypatch.setattr(worker_module, "make_engine", captured)
    statements: Counter[str] = Counter()
    commits: Counter[str] = Counter()
    trips: Counter[tuple[str, str]] = Counter()  # by workflow and activity

    def step() -> tuple[str, str]:
        info = activity.info()
        return info.workflow_id or "", info.activity_type

    def workflow() -> str | None:
        return activity.info().workflow_id if activity.in_activity() else None

    def idle(conn: Any) -> bool:
        raw = conn.connection.driver_connection
        return bool(raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE)

    def count(conn: Any, cursor: Any, statement: str, params: Any, ctx: Any, many: bool) -> None:
        if (wf := workflow()) is not None:
            statements[wf] += 1
            trips[step()] += 2 if idle(conn) else 1

    def commit(conn: Any) -> None:
        if (wf := workflow()) is not None and not idle(conn):
            commits[wf] += 1
            trips[step()] += 1

    pipelined = db.pipelined

    async def counted(
        session: AsyncSession, sent: Sequence[tuple[str, Mapping[str, Any]]]
    ) -> list[tuple[Any, ...] | None]:
        if session.bind is engines[0] and (wf := workflow()) is not None:
            statements[wf] += len(sent)
            trips[step()] += 1
        return await pipelined(session, sent)

    pipelined_rows = db.pipelined_rows

    async def counted_rows(
        session: AsyncSession, sent: Sequence[tuple[str, Mapping[str, Any]]], *, commit: bool
    ) -> list[db.Rows]:
        if session.bind is engines[0] and (wf := workflow()) is not None:
            statements[wf] += len(sent)
            commits[wf] += commit
            trips[step()] += 1
        return await pipelined_rows(session, sent, commit=commit)

    monkeypatch.setattr(db, "pipelined", counted)
    monkeypatch.setattr(db, "pipelined_rows", counted_rows)
    async with make_stack() as stack:
        [engine] = engines
        event.listen(engine.sync_engine, "before_cursor_execute", count)
        event.listen(engine.sync_engine, "commit", commit)
        try:
            cold = await stack.execute("demo.echo", {"count": "statements"})
            warm = await stack.execute("demo.echo", {"count": "statements, again"})
        finally:
            event.remove(engine.sync_engine, "before_cursor_execute", count)
            event.remove(engine.sync_engine, "commit", commit)
    shapes = [
        (cold, WORKER_STATEMENTS, WORKER_ROUND_TRIPS),
        (warm, WARM_STATEMENTS, WARM_ROUND_TRIPS),
    ]
    for resp, sent, round_trips in shapes:
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert body["status"] == "executed" and body["receipt"]["status"] == "success"
        workflow_id = body["workflow_id"]
        assert (statements[workflow_id], commits[workflow_id]) == (sent, WORKER_COMMITS)
        steps = {name: n for (wf, name), n in trips.items() if wf == workflow_id}
        assert steps == round_trips


async def test_a_fresh_execution_records_no_patch_marker(make_stack: StackFactory) -> None:
    """A run takes every patched path with no marker: its policy check's outcome records
    which (``PATHS_VERSION``). A marker, and the search-attribute upsert Temporal adds to it, cost
    the run two history events and the server's write of the upsert before the adapter's
    attempt starts. Its successful attempt records the receipt: the policy check is the
    run's one local activity, and its outcome says the paths."""
    async with make_stack() as stack:
        resp = await stack.execute("demo.echo", {"count": "markers"})
        assert resp.status_code == 200, resp.text
        handle = stack.client.get_workflow_handle(resp.json()["workflow_id"])
        events = (await handle.fetch_history()).events
    patches = [
        e
        for e in events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and e.marker_recorded_event_attributes.marker_name == "core_patch"
    ]
    upserts = [
        e for e in events if e.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
    ]
    assert (patches, upserts) == ([], [])
    local = [
        e
        for e in events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and e.marker_recorded_event_attributes.marker_name == "core_local_activity"
    ]
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert (len(local), scheduled, len(events)) == (1, [CALL_ADAPTER], 12)
    [marker] = local
    [result] = marker.marker_recorded_event_attributes.details["result"].payloads
    [outcome] = await stack.client.data_converter.decode([result], [PolicyOutcome])
    assert outcome.paths_version == PATHS_VERSION
