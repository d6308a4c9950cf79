"""The execute vertical slice through real HTTP, real Temporal and real PostgreSQL."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import func, select
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
)
from temporalio.exceptions import ApplicationError

from store import budgets
from store.models import BudgetUsage, OutcomeEventRow, ReceiptRow
from tests.support.fakes import FakeProvider, Step
from tests.support.stack import Stack
from workflows.execute import STATUS_ATTR


async def count(stack: Stack, model: Any, **where: Any) -> int:
    async with stack.sessions() as s:
        stmt = select(func.count()).select_from(model).filter_by(**where)
        return int((await s.execute(stmt)).scalar_one())


async def test_echo_executes_then_replays(stack: Stack) -> None:
    first = await stack.execute("demo.echo", {"hello": "world"})
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["status"] == "executed"
    assert "x-moat-idempotent-replayed" not in first.headers
    receipt = body["receipt"]
    assert receipt["status"] == "success"
    assert receipt["input_hash"].startswith("sha256:")
    assert receipt["idempotency_key"] == receipt["input_hash"]  # derived from the payload
    assert body["workflow_id"] == receipt["workflow_id"] and body["run_id"]

    again = await stack.execute("demo.echo", {"hello": "world"})
    assert again.status_code == 200
    assert again.headers["x-moat-idempotent-replayed"] == "true"
    assert again.json()["receipt"] == receipt
    assert await count(stack, ReceiptRow, tenant_id=stack.tenant_id) == 1


async def test_http_success_calls_provider_once(stack: Stack, provider: FakeProvider) -> None:
    url = provider.script("/ok", Step(200, {"id": 42}))
    payload = {"method": "POST", "url": url, "json": {"text": "hi"}}
    first = await stack.execute("http.request", payload, key="step-1")
    assert first.status_code == 200, first.text
    second = await stack.execute("http.request", payload, key="step-1")
    assert second.status_code == 200
    assert second.headers["x-moat-idempotent-replayed"] == "true"
    assert second.json()["receipt_id"] == first.json()["receipt_id"]
    assert len(provider.calls_to("/ok")) == 1
    call = provider.calls_to("/ok")[0]
    assert call.headers["idempotency-key"].startswith("moat-")
    assert first.json()["receipt"]["http_status"] == 200
    assert await count(stack, OutcomeEventRow, receipt_id=first.json()["receipt_id"]) == 1


async def test_concurrent_duplicates_execute_once(stack: Stack, provider: FakeProvider) -> None:
    url = provider.script("/storm", Step(200, {"ok": True}, delay=0.3))
    payload = {"method": "POST", "url": url, "json": {"n": 1}}
    async with stack.sessions.begin() as s:
        await budgets.set_budget(s, stack.tenant_id, "http.request", 1000, "day")
    responses = await asyncio.gather(
        *(stack.execute("http.request", payload, key="storm") for _ in range(100))
    )
    failed = {r.text for r in responses if r.status_code != 200}
    assert not failed, failed
    receipt_ids = {r.json()["receipt_id"] for r in responses}
    assert len(receipt_ids) == 1
    # One request started the run (its answer carries its own trace); every other one
    # attached to it (not a replay) or got its stored receipt (a replay), and the header
    # says what the envelope says.
    started = [r for r in responses if r.headers["x-moat-trace-id"] == r.json()["trace_id"]]
    assert len(started) == 1 and "x-moat-idempotent-replayed" not in started[0].headers
    for r in responses:
        assert ("x-moat-idempotent-replayed" in r.headers) == r.json()["replayed"]
    assert len(provider.calls_to("/storm")) == 1
    assert await count(stack, ReceiptRow, tenant_id=stack.tenant_id) == 1
    async with stack.sessions() as s:
        used = (
            await s.execute(
                select(BudgetUsage.used).filter_by(
                    tenant_id=stack.tenant_id, capability_id="http.request"
                )
            )
        ).scalar_one()
    assert used == 1


async def test_a_dry_run_is_marked_planned(stack: Stack) -> None:
    # Ops tell a finished dry run from a run still going by its status search attribute.
    planned = await stack.execute("demo.echo", {"dry": 1}, key="dry-status", dry_run=True)
    assert planned.json()["status"] == "planned", planned.text
    query = f'MoatTenant = "{stack.tenant_id}"'
    for _ in range(100):  # visibility catches up within moments
        runs = [r async for r in stack.client.list_workflows(query)]
        if runs:
            break
        await asyncio.sleep(0.05)
    (run,) = runs
    described = await stack.client.get_workflow_handle(run.id, run_id=run.run_id).describe()
    assert described.typed_search_attributes.get(STATUS_ATTR) == "planned"
    assert described.status == WorkflowExecutionStatus.COMPLETED


async def run_of(stack: Stack, envelope: dict[str, Any]) -> WorkflowExecutionDescription:
    handle = stack.client.get_workflow_handle(
        envelope["workflow_id"], run_id=envelope.get("run_id")
    )
    return await handle.describe()


async def test_a_success_costs_three_temporal_actions(stack: Stack) -> None:
    # What Temporal Cloud bills: the start, the policy step's local activities (one
    # workflow task), the adapter's attempt, which records the receipt itself. A plain
    # success upserts no MoatStatus: its Completed close says it.
    response = await stack.execute("demo.echo", {"quiet": 1}, key="quiet-success")
    assert response.status_code == 200, response.text
    envelope = response.json()
    described = await run_of(stack, envelope)
    assert described.status == WorkflowExecutionStatus.COMPLETED
    assert described.typed_search_attributes.get(STATUS_ATTR) is None
    handle = stack.client.get_workflow_handle(envelope["workflow_id"], run_id=envelope["run_id"])
    events = [event async for event in handle.fetch_history_events()]
    kinds = [event.event_type for event in events]
    # No upsert: not even the SDK's TemporalChangeVersion, which a patch marker would add
    # (not billed, but two history events); the run's paths are in its check's outcome.
    upserts = [
        event.upsert_workflow_search_attributes_event_attributes.search_attributes
        for event in events
        if event.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
    ]
    upserted = {key for attributes in upserts for key in attributes.indexed_fields}
    assert upserted == set()
    assert kinds.count(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED) == 1
    # Local activities are markers after their workflow task's completion, billed once per
    # workflow task that records any.
    tasks_with_local: set[int] = set()
    task = 0
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            task = event.event_id
        elif (
            event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
            and event.marker_recorded_event_attributes.marker_name == "core_local_activity"
        ):
            tasks_with_local.add(task)
    assert len(tasks_with_local) == 1


async def test_a_failed_execution_ends_its_run_failed(stack: Stack, provider: FakeProvider) -> None:
    # An operator finds failed executions in the Web UI's list: the run ends failed, after
    # recording its receipt, and the caller's answer is the one a completed run gave.
    url = provider.script("/refused", Step(422, body={"error": "invalid_title"}))
    payload = {"method": "POST", "url": url}
    response = await stack.execute("http.request", payload, key="ends-failed")
    assert response.status_code == 502, response.text
    assert "x-moat-idempotent-replayed" not in response.headers
    envelope = response.json()
    receipt = envelope["receipt"]
    assert envelope["status"] == "failed" and envelope["output"] is None
    assert envelope["receipt_id"] == receipt["id"] and envelope["workflow_id"]
    assert receipt["status"] == "failure" and receipt["http_status"] == 422
    assert envelope["error"]["code"] == receipt["error_code"]
    assert envelope["error"]["details"]["provider_response"] == {"error": "invalid_title"}
    assert await count(stack, ReceiptRow, id=receipt["id"]) == 1

    described = await run_of(stack, envelope)
    assert described.status == WorkflowExecutionStatus.FAILED
    assert described.typed_search_attributes.get(STATUS_ATTR) == "failure"
    with pytest.raises(WorkflowFailureError) as failed:
        await stack.client.get_workflow_handle(envelope["workflow_id"]).result()
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.non_retryable
    assert cause.type == receipt["error_code"] and receipt["id"] in cause.message

    # The stored answer is the first one but for the request's own trace id, and says it
    # is a replay.
    again = await stack.execute("http.request", payload, key="ends-failed")
    assert again.status_code == 502 and again.headers["x-moat-idempotent-replayed"] == "true"
    assert envelope["replayed"] is False and again.json()["replayed"] is True
    first_body = {k: v for k, v in envelope.items() if k not in ("trace_id", "replayed")}
    assert {
        k: v for k, v in again.json().items() if k not in ("trace_id", "replayed")
    } == first_body
    assert len(provider.calls_to("/refused")) == 1


async def test_an_executed_or_planned_run_completes(stack: Stack) -> None:
    executed = await stack.execute("demo.echo", {"ends": "completed"})
    assert executed.status_code == 200, executed.text
    assert (await run_of(stack, executed.json())).status == WorkflowExecutionStatus.COMPLETED


async def test_a_denied_execution_ends_its_run_failed(stack: Stack) -> None:
    async with stack.sessions.begin() as s:
        await budgets.set_budget(s, stack.tenant_id, "demo.echo", 0, "day")
    denied = await stack.execute("demo.echo", {"denied": 1})
    assert denied.status_code == 403, denied.text
    assert denied.json()["error"]["code"] == "budget_exceeded"
    assert (await run_of(stack, denied.json())).status == WorkflowExecutionStatus.FAILED
