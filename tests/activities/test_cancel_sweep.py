"""Intake and cancel in an execution's event chain: a replay adds no second intake; a run an
operator terminated or cancelled gets ``RUN_CANCELLED`` from the sweep (run directly here,
not by its schedule), once, and its run shows CANCELLED; a later run resuming the execution
ends it as that run records. The projection and a rebuild from the events agree throughout.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import Client, ScheduleActionStartWorkflow, WorkflowExecutionStatus
from temporalio.testing import ActivityEnvironment

from activities.cancels import CancelSweep, closed_runs_query
from schemas.cancels import CancelSweepInput, CancelSweepReport
from schemas.capabilities import CapabilityCatalog
from schemas.events import Event, EventType, RunStatus
from schemas.ids import uuid7
from schemas.names import CANCEL_SWEEP_WORKFLOW
from schemas.run import ExecuteResult, ExecuteWorkflowInput
from starter.runtime.schedules import ensure_cancel_sweep_schedule
from store import events as event_log
from store.keyrings.start import StartKeyring
from tests.gateway.test_approvals import bearer, call, decide, new_key, pending, setup
from tests.store.test_events import assert_causal, chain_of
from tests.support.fakes import FakeProvider
from tests.support.stack import Stack


async def sweep(stack: Stack, receipt_id: str | None = None) -> CancelSweepReport:
    """The sweep of the stack's tenant; with ``receipt_id``, until it has been swept (the
    visibility store sees a closed run a moment after it closes)."""
    sweeper = CancelSweep(stack.sessions, stack.client)
    inp = CancelSweepInput(as_of=datetime.now(UTC), tenant_id=stack.tenant_id)
    for _ in range(100):
        report: CancelSweepReport = await ActivityEnvironment().run(sweeper.sweep_cancelled, inp)
        if receipt_id is None or receipt_id in report.cancelled:
            return report
        await asyncio.sleep(0.1)
        inp = inp.model_copy(update={"as_of": datetime.now(UTC)})
    raise AssertionError(f"{receipt_id} was never swept")


async def projection_agrees(stack: Stack) -> None:
    async with stack.sessions() as s:
        assert await event_log.verify(s, stack.tenant_id) == []


async def run_status(stack: Stack, receipt_id: str) -> RunStatus:
    async with stack.sessions() as s:
        run = await event_log.get_run(s, stack.tenant_id, receipt_id)
    assert run is not None
    return run.status


def types(events: list[Event]) -> list[str]:
    return [e.event_type for e in events]


def test_the_sweep_asks_for_one_tenants_terminated_and_cancelled_executions() -> None:
    query = closed_runs_query(datetime(2026, 11, 1, tzinfo=UTC), "t-'1")
    assert "WorkflowType = 'ExecuteCapability' OR WorkflowType = 'ExecutePlan'" in query
    assert "ExecutionStatus = 'Terminated' OR ExecutionStatus = 'Canceled'" in query
    assert query.endswith("AND MoatTenant = 't-1'")


async def test_a_replay_by_a_new_run_adds_no_second_intake(stack: Stack) -> None:
    first = (await stack.execute("demo.echo", {"n": 1}, key="intake-replay")).json()
    capability = CapabilityCatalog().get("demo.echo")
    assert capability is not None
    # A start for the same key after the run closed (as a racing gateway makes): the new
    # run answers from the stored receipt.
    arg = ExecuteWorkflowInput(
        receipt_id=str(uuid7()),
        tenant_id=stack.tenant_id,
        idempotency_key="intake-replay",
        input_hash=first["receipt"]["input_hash"],
        capability=capability,
        input={"n": 1},
        request_id=str(uuid7()),
        trace_id="1" * 32,
        submitted_at=datetime.now(UTC),
    )
    client: Client = stack.client
    result = await client.execute_workflow(
        "ExecuteCapability",
        StartKeyring.from_settings(stack.settings).signed(arg, first["workflow_id"]),
        id=first["workflow_id"],
        task_queue=stack.settings.task_queue,
        result_type=ExecuteResult,
    )
    assert result.replayed
    events = await chain_of(stack, first["receipt_id"])
    assert types(events) == [
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
        "RUN_REPLAYED",
        "MANIFEST_WRITTEN",
    ]
    assert_causal(events, first["receipt_id"])
    assert events[0].event_data["request_id"] == first["receipt"]["request_id"]
    # The replaying run's own receipt id has no chain: it answered the original's.
    assert await chain_of(stack, arg.ref.receipt_id) == []
    assert await run_status(stack, first["receipt_id"]) == RunStatus.COMPLETED
    await projection_agrees(stack)


async def test_a_terminated_execution_is_cancelled_then_resumed(
    stack: Stack, provider: FakeProvider
) -> None:
    url = await setup(stack, provider, "/cancel-term")
    envelope = await pending(stack, url, "cancel-term")
    receipt_id = envelope["receipt_id"]
    handle = stack.client.get_workflow_handle(envelope["workflow_id"])
    await handle.terminate(reason="an operator stopped it")

    report = await sweep(stack, receipt_id)
    events = await chain_of(stack, receipt_id)
    assert types(events)[:3] == ["SIGNAL_RECEIVED", "SIGNAL_PROCESSING_STARTED", "RUN_STARTED"]
    cancelled = events[-1]
    assert cancelled.event_type == EventType.RUN_CANCELLED
    assert_causal(events, receipt_id)
    assert cancelled.event_data["how"] == "terminated"
    assert cancelled.event_data["reason"] == "an operator stopped it"
    assert cancelled.event_data["identity"]  # the terminating client's
    assert cancelled.event_data["run_id"] == envelope["run_id"]
    assert cancelled.actor == "moat.cancel_sweep"
    assert report.checked >= 1
    assert await run_status(stack, receipt_id) == RunStatus.CANCELLED
    await projection_agrees(stack)
    # Swept again: nothing new.
    again = await sweep(stack)
    assert receipt_id not in again.cancelled
    assert len(await chain_of(stack, receipt_id)) == len(events)

    # The next request with the key resumes the execution: a run of its own, which the
    # intake counts as taken up again (not received again), and whose outcome decides.
    resumed = await stack.execute("http.request", call(url), key="cancel-term")
    assert resumed.status_code == 202, resumed.text
    assert resumed.json()["receipt_id"] == receipt_id
    approver = await new_key(stack, ["approvals:write"])
    decided = await decide(stack, approver, resumed.json()["approval"])
    assert decided.status_code == 200, decided.text
    await ended(stack, receipt_id)
    events = await chain_of(stack, receipt_id)
    assert types(events).count("SIGNAL_RECEIVED") == 1
    assert types(events).count("SIGNAL_PROCESSING_STARTED") == 2
    assert types(events).index("RUN_CANCELLED") < types(events).index("RUN_COMPLETED")
    assert await run_status(stack, receipt_id) == RunStatus.COMPLETED
    await projection_agrees(stack)
    assert receipt_id not in (await sweep(stack)).cancelled


async def ended(stack: Stack, receipt_id: str) -> dict[str, Any]:
    for _ in range(200):
        polled = await stack.http.get(
            f"{stack.url}/v1/executions/{receipt_id}", headers=bearer(stack.api_key)
        )
        if polled.status_code == 200:
            answer: dict[str, Any] = polled.json()
            return answer
        await asyncio.sleep(0.1)
    raise AssertionError(f"{receipt_id} never ended")


async def test_a_workflow_cancel_is_recorded_as_the_terminate_is(
    stack: Stack, provider: FakeProvider
) -> None:
    url = await setup(stack, provider, "/cancel-wf")
    envelope = await pending(stack, url, "cancel-wf")
    handle = stack.client.get_workflow_handle(envelope["workflow_id"])
    await handle.cancel()
    for _ in range(100):
        if (await handle.describe()).status == WorkflowExecutionStatus.CANCELED:
            break
        await asyncio.sleep(0.1)
    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
    await sweep(stack, envelope["receipt_id"])
    events = await chain_of(stack, envelope["receipt_id"])
    assert events[-1].event_type == EventType.RUN_CANCELLED
    assert events[-1].event_data["how"] == "cancelled"
    assert "identity" in events[-1].event_data
    assert await run_status(stack, envelope["receipt_id"]) == RunStatus.CANCELLED
    await projection_agrees(stack)
    assert not provider.calls_to("/cancel-wf")


async def test_the_sweep_runs_as_a_workflow_and_on_a_schedule(stack: Stack) -> None:
    schedule_id = await ensure_cancel_sweep_schedule(stack.client, stack.settings)
    assert await ensure_cancel_sweep_schedule(stack.client, stack.settings) == schedule_id
    description = await stack.client.get_schedule_handle(schedule_id).describe()
    assert description.schedule.spec.intervals[0].every == timedelta(minutes=5)
    action = description.schedule.action
    assert isinstance(action, ScheduleActionStartWorkflow)
    assert action.workflow == CANCEL_SWEEP_WORKFLOW
    # The worker runs the sweep's workflow (the schedule starts it on its deployment's queue).
    report = await stack.client.execute_workflow(
        CANCEL_SWEEP_WORKFLOW,
        CancelSweepInput(tenant_id=stack.tenant_id),
        id=f"sweep-{uuid7()}",
        task_queue=stack.settings.task_queue,
        result_type=CancelSweepReport,
    )
    assert report.cancelled == [] and report.as_of is not None
