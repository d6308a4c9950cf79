"""The event log: causal chains per outcome, immutability, and projection rebuilds."""

from __future__ import annotations

import asyncio
import json

import pytest
from sqlalchemy import delete, text, update
from sqlalchemy import event as sa_event
from sqlalchemy.exc import DBAPIError

from activities.evidence import Chain
from schemas.events import AggregateType, Event, EventDraft, EventType, RunStatus
from schemas.ids import uuid7
from schemas.webhooks import compensating_action_ref
from store import budgets
from store import events as event_log
from store.models import OrchestrationEvent, RunRow
from tests.activities.test_outcomes import post
from tests.support.fakes import FakeProvider, Step
from tests.support.stack import Stack


async def chain_of(stack: Stack, receipt_id: str) -> list[Event]:
    async with stack.sessions() as s:
        return await event_log.events_of(s, stack.tenant_id, receipt_id)


def assert_causal(events: list[Event], receipt_id: str) -> None:
    """One correlation id, increasing sequence numbers, each event caused by an earlier one."""
    seen: set[str] = set()
    for i, event in enumerate(events):
        assert event.correlation_id == receipt_id
        if i == 0:
            assert event.causation_id is None
        else:
            assert event.causation_id in seen, event
            assert event.sequence_number > events[i - 1].sequence_number
        seen.add(event.id)


async def test_success_chain(stack: Stack, provider: FakeProvider) -> None:
    url = provider.script("/ev-ok", Step(200))
    body = (await stack.execute("http.request", post(url), key="ev-ok")).json()
    events = await chain_of(stack, body["receipt_id"])
    assert [e.event_type for e in events] == [
        "SIGNAL_RECEIVED",
        "SIGNAL_PROCESSING_STARTED",
        "RUN_STARTED",
        "POLICY_EVALUATED",
        "EFFECT_REQUESTED",
        "STEP_STARTED",
        "TOOL_CALLED",
        "TOOL_COMPLETED",
        "STEP_COMPLETED",
        "EFFECT_COMPLETED",
        "RUN_COMPLETED",
        "SIGNAL_PROCESSED",
        "MANIFEST_WRITTEN",
    ]
    assert_causal(events, body["receipt_id"])
    assert {e.event_data["run_id"] for e in events} == {body["run_id"]}
    # The intake: the request as the gateway received it, and the outcome it got.
    received, processed = events[0], events[-2]
    assert received.aggregate_type == "SIGNAL" and received.causation_id is None
    assert received.aggregate_id == processed.aggregate_id == f"{body['receipt_id']}:signal"
    assert received.event_data["trace_id"] == body["trace_id"]
    assert received.event_data["request_id"] == body["receipt"]["request_id"]
    assert received.event_data["capability_id"] == "http.request"
    assert events[1].event_data["resumed"] is False
    assert events[2].causation_id == events[1].id  # RUN_STARTED follows the intake
    assert processed.event_data["receipt_status"] == "success"
    async with stack.sessions() as s:
        run = await event_log.get_run(s, stack.tenant_id, body["receipt_id"])
    assert run is not None and run.status == RunStatus.COMPLETED
    assert (run.total_steps, run.failed_steps, run.retries) == (2, 0, 0)
    assert run.workflow_id == body["workflow_id"] and run.run_id == body["run_id"]


async def test_retries_then_dead_letter_chain(fast: Stack, provider: FakeProvider) -> None:
    url = provider.script("/ev-500", Step(500))
    body = (await fast.execute("test.http", post(url), key="ev-500")).json()
    events = await chain_of(fast, body["receipt_id"])
    assert [e.event_type for e in events] == [
        "SIGNAL_RECEIVED",
        "SIGNAL_PROCESSING_STARTED",
        "RUN_STARTED",
        "POLICY_EVALUATED",
        "EFFECT_REQUESTED",
        "STEP_STARTED",
        "TOOL_CALLED",
        "TOOL_FAILED",
        "EFFECT_RETRYING",
        "STEP_RETRIED",
        "TOOL_CALLED",
        "TOOL_FAILED",
        "EFFECT_RETRYING",
        "STEP_RETRIED",
        "TOOL_CALLED",
        "TOOL_FAILED",
        "STEP_FAILED",
        "EFFECT_FAILED",
        "EFFECT_DEAD_LETTERED",
        "RUN_FAILED",
        "SIGNAL_PROCESSED",
        "MANIFEST_WRITTEN",
    ]
    assert_causal(events, body["receipt_id"])
    retrying = [e for e in events if e.event_type == "EFFECT_RETRYING"]
    assert [e.event_data["attempt"] for e in retrying] == [1, 2]
    assert all(e.event_data["http_status"] == 500 for e in retrying)
    failed = [e for e in events if e.event_type == "TOOL_FAILED"]
    assert [e.event_data["retry_count"] for e in failed] == [0, 1, 2]
    # The last attempt is not retried: no next attempt is announced.
    assert [e.event_data["next_retry_at"] is None for e in failed] == [False, False, True]
    async with fast.sessions() as s:
        run = await event_log.get_run(s, fast.tenant_id, body["receipt_id"])
    assert run is not None and run.status == RunStatus.FAILED
    assert (run.total_steps, run.failed_steps, run.retries) == (2, 1, 2)
    # The dead-lettered run's manifest names its compensating action.
    path = fast.settings.manifests_dir / fast.tenant_id / body["run_id"] / "manifest.json"
    manifest = json.loads(await asyncio.to_thread(path.read_bytes))
    ref = manifest["outputs"]["compensating_action_ref"]
    assert ref == compensating_action_ref(body["receipt_id"])
    record = await fast.http.get(
        fast.url + ref, headers={"Authorization": f"Bearer {fast.api_key}"}
    )
    assert record.json()["receipt_id"] == body["receipt_id"]
    assert manifest["metadata"]["dlq_entry"] is True
    assert manifest["attempt"] == 2  # 0-based: the third attempt
    assert manifest["tools"][0]["result"]["status"] == "failure"


async def test_policy_denial_chain(stack: Stack, provider: FakeProvider) -> None:
    url = provider.script("/ev-denied", Step(200))
    async with stack.sessions.begin() as s:
        await budgets.set_budget(s, stack.tenant_id, "http.request", 0, "day")
    body = (await stack.execute("http.request", post(url), key="ev-denied")).json()
    events = await chain_of(stack, body["receipt_id"])
    assert [e.event_type for e in events] == [
        "SIGNAL_RECEIVED",
        "SIGNAL_PROCESSING_STARTED",
        "RUN_STARTED",
        "POLICY_EVALUATED",
        "RUN_FAILED",
        "SIGNAL_PROCESSED",
        "MANIFEST_WRITTEN",
    ]
    assert events[3].event_data["rule_hit"] == "BUDGET_EXCEEDED"
    assert events[5].event_data["receipt_status"] == "policy_denied"
    assert_causal(events, body["receipt_id"])
    async with stack.sessions() as s:
        run = await event_log.get_run(s, stack.tenant_id, body["receipt_id"])
    assert run is not None and run.status == RunStatus.DENIED


async def test_dry_run_is_planned_and_takes_nothing(stack: Stack, provider: FakeProvider) -> None:
    url = provider.script("/ev-dry", Step(200))
    planned = await stack.execute("http.request", post(url), key="dry", dry_run=True)
    assert planned.status_code == 200, planned.text
    body = planned.json()
    assert body["status"] == "planned"
    assert body["plan"]["decision"] == "allow" and body["receipt"] is None
    assert provider.calls_to("/ev-dry") == []
    # The key was not taken: the real execution runs now.
    real = await stack.execute("http.request", post(url), key="dry")
    assert real.status_code == 200 and "x-moat-idempotent-replayed" not in real.headers
    assert len(provider.calls_to("/ev-dry")) == 1


async def test_events_are_write_once(stack: Stack) -> None:
    await stack.execute("demo.echo", {"e": 1}, key="ev-imm")
    async with stack.sessions() as s:
        with pytest.raises(DBAPIError, match="write-once"):
            await s.execute(
                update(OrchestrationEvent)
                .filter_by(tenant_id=stack.tenant_id)
                .values(actor="someone else")
            )
        await s.rollback()
        with pytest.raises(DBAPIError, match="write-once"):
            await s.execute(delete(OrchestrationEvent).filter_by(tenant_id=stack.tenant_id))
        await s.rollback()
        with pytest.raises(DBAPIError, match="write-once"):
            await s.execute(text("TRUNCATE orchestration_events CASCADE"))
        await s.rollback()


async def test_rebuild_matches_projection_and_reports_corruption(stack: Stack) -> None:
    ids = [
        (await stack.execute("demo.echo", {"i": i}, key=f"rb-{i}")).json()["receipt_id"]
        for i in range(3)
    ]
    async with stack.sessions() as s:
        rebuilt = await event_log.rebuild(s, stack.tenant_id)
        stored = await event_log.stored_runs(s, stack.tenant_id)
    assert set(rebuilt) == set(ids) and rebuilt == stored
    async with stack.sessions.begin() as s:
        await s.execute(update(RunRow).filter_by(receipt_id=ids[1]).values(status="FAILED"))
    async with stack.sessions() as s:
        diffs = await event_log.verify(s, stack.tenant_id)
    assert [d.receipt_id for d in diffs] == [ids[1]]
    assert diffs[0].fields == {"status": ("FAILED", "COMPLETED")}


async def test_a_retried_append_writes_only_the_new_events_and_projects_them_once(
    stack: Stack,
) -> None:
    """A step retried after its transaction committed appends its events again: those
    already there are skipped (and not projected twice), the new ones written in order."""
    receipt_id, run_id = str(uuid7()), str(uuid7())
    chain = Chain(stack.tenant_id, receipt_id, run_id, "moat.test")
    chain.add(EventType.RUN_STARTED, AggregateType.RUN, receipt_id, workflow_id="wf-append")
    chain.add(EventType.POLICY_EVALUATED, AggregateType.POLICY, f"{receipt_id}:policy")
    first = list(chain.drafts)
    async with stack.sessions.begin() as s:
        written = await event_log.append(s, first)
    assert [e.id for e in written] == [d.id for d in first]
    chain.add(EventType.STEP_FAILED, AggregateType.STEP, f"{receipt_id}:adapter")
    async with stack.sessions.begin() as s:
        again = await event_log.append(s, chain.drafts)
        alone = await event_log.append(s, chain.drafts[-1:])
    assert [e.id for e in again] == [chain.drafts[-1].id] and alone == []
    events = await chain_of(stack, receipt_id)
    assert [e.id for e in events] == [d.id for d in chain.drafts]
    assert_causal(events, receipt_id)
    async with stack.sessions() as s:
        state = await event_log.get_run(s, stack.tenant_id, receipt_id)
        rebuilt = await event_log.rebuild(s, stack.tenant_id)
    assert state is not None and (state.total_steps, state.failed_steps) == (2, 1)
    assert state.last_sequence == events[-1].sequence_number
    assert rebuilt[receipt_id] == state


async def test_concurrent_appends_to_one_run_all_count(stack: Stack) -> None:
    """The projection adds in SQL, without reading the run first: appends racing on one run
    (an approval decided as it expires, a reconcile beside a retry) all count, and the run
    ends as a rebuild from the log has it."""
    receipt_id, run_id = str(uuid7()), str(uuid7())
    chain = Chain(stack.tenant_id, receipt_id, run_id, "moat.test")
    chain.add(EventType.RUN_STARTED, AggregateType.RUN, receipt_id, workflow_id="wf-race")
    async with stack.sessions.begin() as s:
        await event_log.append(s, chain.drafts)

    async def step(i: int) -> None:
        kind = EventType.STEP_FAILED if i % 4 == 0 else EventType.STEP_COMPLETED
        draft = EventDraft(
            id=str(uuid7()),
            tenant_id=stack.tenant_id,
            event_type=kind,
            aggregate_type=AggregateType.STEP,
            aggregate_id=f"{receipt_id}:step-{i}",
            correlation_id=receipt_id,
            actor="moat.test",
        )
        async with stack.sessions.begin() as s:
            await event_log.append(s, [draft])

    await asyncio.gather(*(step(i) for i in range(24)))
    async with stack.sessions() as s:
        state = await event_log.get_run(s, stack.tenant_id, receipt_id)
        rebuilt = await event_log.rebuild(s, stack.tenant_id)
    assert state is not None
    assert (state.total_steps, state.failed_steps) == (24, 6)
    assert rebuilt[receipt_id] == state


async def test_an_execution_s_events_and_its_run_move_in_one_statement(stack: Stack) -> None:
    """One execution's batch is one statement: its events, the first one's cause read from
    the log (a chain begun by ``start_chain``), and the run's move, which a rebuild from
    the log agrees with (the times the events set are their ``occurred_at``)."""
    receipt_id, run_id = str(uuid7()), str(uuid7())
    sent: list[str] = []

    def count(conn: object, cursor: object, statement: str, *rest: object) -> None:
        sent.append(statement)

    engine = stack.sessions.kw["bind"].sync_engine
    sa_event.listen(engine, "before_cursor_execute", count)
    try:
        started = Chain(stack.tenant_id, receipt_id, run_id, "moat.test")
        started.add(EventType.RUN_STARTED, AggregateType.RUN, receipt_id, workflow_id="wf-one")
        started.add(EventType.POLICY_EVALUATED, AggregateType.POLICY, f"{receipt_id}:policy")
        async with stack.sessions.begin() as s:
            first = await started.append(s)
        later = Chain(stack.tenant_id, receipt_id, run_id, "moat.test", cause_from_log=True)
        later.add(EventType.STEP_RETRIED, AggregateType.STEP, f"{receipt_id}:adapter")
        later.add(EventType.STEP_FAILED, AggregateType.STEP, f"{receipt_id}:adapter")
        later.add(EventType.RUN_CANCELLED, AggregateType.RUN, receipt_id)
        async with stack.sessions.begin() as s:
            second = await later.append(s)
    finally:
        sa_event.remove(engine, "before_cursor_execute", count)
    assert len(sent) == 2, sent
    assert [e.id for e in first + second] == [d.id for d in started.drafts + later.drafts]
    assert second[0].causation_id == first[-1].id
    events = await chain_of(stack, receipt_id)
    assert_causal(events, receipt_id)
    async with stack.sessions() as s:
        state = await event_log.get_run(s, stack.tenant_id, receipt_id)
        rebuilt = await event_log.rebuild(s, stack.tenant_id)
    assert state is not None and rebuilt[receipt_id] == state
    assert state.status == RunStatus.CANCELLED and state.completed_at == events[-1].occurred_at
    assert (state.total_steps, state.failed_steps, state.retries) == (2, 1, 1)
    assert state.started_at == events[0].occurred_at
    assert state.last_sequence == events[-1].sequence_number
