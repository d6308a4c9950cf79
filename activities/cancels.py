"""The cancel sweep: ``RUN_CANCELLED`` for each execution whose Temporal run an operator
terminated or cancelled before it recorded an outcome (``schemas.cancels``).

A run qualifies when its execution has no receipt, the ``runs`` projection still shows that
very run running, and no later run of the workflow carries the same receipt (a reset, or a
new request resuming the execution under its key: that run records the outcome, or is swept
itself). The event's id is derived from the execution and the run, so sweeping twice
appends nothing twice.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError

from activities.evidence import start_chain
from schemas.cancels import CancelSweepInput, CancelSweepReport
from schemas.errors import ErrorCode
from schemas.events import AggregateType, EventType, RunStatus
from schemas.names import (
    EXECUTE_WORKFLOW,
    PLAN_WORKFLOW,
    RECEIPT_ATTRIBUTE,
    SWEEP_CANCELLED,
    TENANT_ATTRIBUTE,
)
from store import events as event_log
from store import plans, receipts, tenancy

ACTOR = "moat.cancel_sweep"
_TENANT = SearchAttributeKey.for_keyword(TENANT_ATTRIBUTE)
_RECEIPT = SearchAttributeKey.for_keyword(RECEIPT_ATTRIBUTE)
_HOW = {
    WorkflowExecutionStatus.TERMINATED: "terminated",
    WorkflowExecutionStatus.CANCELED: "cancelled",
}


def closed_runs_query(since: datetime, tenant_id: str | None) -> str:
    """The visibility query of the execution (and plan) runs terminated or cancelled since
    ``since``. A plan's run carries its plan id as ``MoatReceipt``."""
    query = (
        f"(WorkflowType = '{EXECUTE_WORKFLOW}' OR WorkflowType = '{PLAN_WORKFLOW}') "
        "AND (ExecutionStatus = 'Terminated' OR ExecutionStatus = 'Canceled') "
        f"AND CloseTime >= '{since.isoformat()}'"
    )
    if tenant_id is not None:
        query += f" AND {TENANT_ATTRIBUTE} = '{tenant_id.replace(chr(39), '')}'"
    return query


class CancelSweep:
    """The ``sweep_cancelled_runs`` activity, built once in ``worker.py``."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], client: Client) -> None:
        self._sessions = sessions
        self._client = client

    @activity.defn(name=SWEEP_CANCELLED)
    async def sweep_cancelled(self, inp: CancelSweepInput) -> CancelSweepReport:
        assert inp.as_of is not None
        report = CancelSweepReport(as_of=inp.as_of)
        since = inp.as_of - timedelta(seconds=inp.window_seconds)
        async for run in self._client.list_workflows(closed_runs_query(since, inp.tenant_id)):
            tenant_id = run.typed_search_attributes.get(_TENANT)
            receipt_id = run.typed_search_attributes.get(_RECEIPT)
            if not tenant_id or not receipt_id or run.status not in _HOW:
                continue
            report.checked += 1
            activity.heartbeat(report.checked)
            if not await self._open(tenant_id, receipt_id, run.run_id):
                continue
            if await self._continued(run, receipt_id):
                continue
            why = await self._why(run, _HOW[run.status])
            if await self._cancel(tenant_id, receipt_id, run, why):
                report.cancelled.append(receipt_id)
        return report

    async def _open(self, tenant_id: str, receipt_id: str, run_id: str) -> bool:
        """Whether the execution still waits for ``run_id`` to record it."""
        async with self._sessions.begin() as session:
            await tenancy.set_tenant(session, tenant_id)
            return await _unrecorded(session, tenant_id, receipt_id, run_id)

    async def _continued(self, run: WorkflowExecution, receipt_id: str) -> bool:
        """Whether a later run of the workflow carries on the same execution."""
        try:
            latest = await self._client.get_workflow_handle(run.id).describe()
        except RPCError:
            return False
        return (
            latest.run_id != run.run_id
            and latest.typed_search_attributes.get(_RECEIPT) == receipt_id
        )

    async def _why(self, run: WorkflowExecution, how: str) -> dict[str, Any]:
        """Who ended the run and why, as its history tells it (when it does)."""
        why: dict[str, Any] = {"how": how}
        handle = self._client.get_workflow_handle(run.id, run_id=run.run_id)
        async for event in handle.fetch_history_events():
            if event.HasField("workflow_execution_terminated_event_attributes"):
                ended = event.workflow_execution_terminated_event_attributes
                why |= {"reason": ended.reason, "identity": ended.identity}
            elif event.HasField("workflow_execution_cancel_requested_event_attributes"):
                asked = event.workflow_execution_cancel_requested_event_attributes
                why |= {"reason": asked.cause, "identity": asked.identity}
        if run.close_time is not None:
            why["closed_at"] = run.close_time.isoformat()
        return why

    async def _cancel(
        self, tenant_id: str, receipt_id: str, run: WorkflowExecution, why: dict[str, Any]
    ) -> bool:
        """Append the execution's ``RUN_CANCELLED`` (True: written now)."""
        async with self._sessions.begin() as session:
            chain = await start_chain(session, tenant_id, receipt_id, run.run_id, ACTOR)
            if not await _unrecorded(session, tenant_id, receipt_id, run.run_id):
                return False
            chain.add(
                EventType.RUN_CANCELLED,
                AggregateType.RUN,
                receipt_id,
                workflow_id=run.id,
                **why,
            )
            if run.workflow_type == PLAN_WORKFLOW:
                await _plan_cancelled(session, tenant_id, receipt_id, why)
                chain.add(
                    EventType.SIGNAL_PROCESSING_FAILED,
                    AggregateType.SIGNAL,
                    receipt_id,
                    error_code=ErrorCode.PLAN_CANCELLED,
                )
            return bool(await chain.append(session))


async def _plan_cancelled(
    session: AsyncSession, tenant_id: str, plan_id: str, why: dict[str, Any]
) -> None:
    """A plan whose run an operator terminated: it ends failed, ``plan_cancelled``; a step
    that was running is not known to have ended (its execution is swept on its own)."""
    row = await plans.get(session, tenant_id, plan_id, lock=True)
    if row is None or row.status != "accepted":
        return
    await plans.save(
        session,
        row,
        status="failed",
        steps=row.steps,
        run_id=row.run_id,
        error={
            "code": ErrorCode.PLAN_CANCELLED,
            "message": f"The plan's run was {why['how']} in Temporal"
            + (f": {why['reason']}" if why.get("reason") else "")
            + ".",
            "details": {"identity": why.get("identity")},
        },
    )


async def _unrecorded(session: AsyncSession, tenant_id: str, receipt_id: str, run_id: str) -> bool:
    """No receipt yet, and the projection shows ``run_id`` running the execution."""
    state = await event_log.get_run(session, tenant_id, receipt_id)
    if state is None or state.run_id != run_id or state.status != RunStatus.RUNNING:
        return False
    return await receipts.get_receipt(session, tenant_id, receipt_id) is None
