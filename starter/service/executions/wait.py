"""Wait: the run's result within the caller's wait budget, or ``TimeoutError`` as soon as
it is clear it will not come in time (the budget is spent, or the run waits for a person).
"""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from schemas.approvals import Approval
from schemas.run import ExecuteResult
from starter.service import approvals as approvals_service
from starter.service import policy as policy_service
from store import tenancy
from store.held import HeldReads

# How often a run that may wait for a person is looked at while the gateway waits for it.
APPROVAL_POLL_SECONDS = 0.2


async def result_within(
    handle: Any,
    sessions: async_sessionmaker[AsyncSession],
    tenant_id: str,
    workflow_id: str,
    wait_seconds: float,
    policy_mode: str | None,
    reads: HeldReads | None = None,
) -> ExecuteResult:
    """The run's result within ``wait_seconds``; ``TimeoutError`` when it is not there,
    or as soon as the run waits for a person (nobody answers that in a wait budget).
    With ``policy_mode``, a run still going after each ``APPROVAL_POLL_SECONDS`` is
    looked at for an approval it waits for, once the tenant's policy is found strict
    (both read on a held connection, ``reads``, when one is free)."""
    task = asyncio.ensure_future(handle.result())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_seconds
    strict: bool | None = None if policy_mode is not None else False
    try:
        while True:
            left = deadline - loop.time()
            if left <= 0:
                raise TimeoutError
            step = left if strict is False else min(APPROVAL_POLL_SECONDS, left)
            done, _ = await asyncio.wait({task}, timeout=step)
            if done:
                return answer_of(task)
            if strict is None:
                assert policy_mode is not None
                strict = await _strict(sessions, reads, tenant_id, policy_mode)
            if strict and await _awaits_approval(sessions, reads, tenant_id, workflow_id):
                raise TimeoutError
    finally:
        task.cancel()


def answer_of(task: asyncio.Future[Any]) -> ExecuteResult:
    """The result of a run that ended: what it returned, or the answer a run whose
    execution failed carries in its failure; any other failure of the run is raised."""
    try:
        return task.result()  # type: ignore[no-any-return]
    except WorkflowFailureError as err:
        result = failed_answer(err)
        if result is None:
            raise
        return result


def failed_answer(err: WorkflowFailureError) -> ExecuteResult | None:
    """The ``ExecuteResult`` of a run that ended failed because its execution failed (the
    same answer a completed run returns, receipt recorded); None for a run that failed
    inside Moat."""
    cause = err.cause
    if isinstance(cause, ApplicationError):
        return ExecuteResult.of_failure(cause.type, cause.details)
    return None


async def awaited_approval(
    sessions: async_sessionmaker[AsyncSession], tenant_id: str, workflow_id: str
) -> Approval | None:
    """The approval the run ``workflow_id`` waits for, if it waits for one."""
    async with tenancy.tenant_transaction(sessions, tenant_id) as session:
        return await approvals_service.pending_of_workflow(session, tenant_id, workflow_id)


async def _awaits_approval(
    sessions: async_sessionmaker[AsyncSession],
    reads: HeldReads | None,
    tenant_id: str,
    workflow_id: str,
) -> bool:
    """Whether the run waits for an approval, looked at every ``APPROVAL_POLL_SECONDS`` of a
    strict tenant's wait: one statement on a held connection, or a transaction when none
    is free."""
    if reads is not None:
        waits = await approvals_service.awaits_approval_held(reads, tenant_id, workflow_id)
        if waits is not None:
            return waits
    return await awaited_approval(sessions, tenant_id, workflow_id) is not None


async def _strict(
    sessions: async_sessionmaker[AsyncSession],
    reads: HeldReads | None,
    tenant_id: str,
    policy_mode: str,
) -> bool:
    """Whether the tenant's policy in force is strict: one statement on a held connection
    (a run still going after ``APPROVAL_POLL_SECONDS``, as every run is under load, would
    otherwise cost a transaction of four statements and the policy document's load), or
    in a transaction when none is free."""
    if reads is not None:
        strict = await policy_service.is_strict_held(reads, tenant_id, policy_mode)
        if strict is not None:
            return strict
    async with tenancy.tenant_transaction(sessions, tenant_id) as session:
        return await policy_service.is_strict(session, tenant_id, policy_mode)
