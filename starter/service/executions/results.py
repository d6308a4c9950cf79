"""Results: what a run comes to for the request that waited for it: ``executed`` or
``failed`` (its receipt), ``planned`` (a dry run), or ``accepted`` (still going after the
wait budget); and a run that failed inside Moat.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from schemas.approvals import ApprovalRef
from schemas.errors import ErrorCode
from schemas.execute import Envelope, EnvelopeStatus, KeptOutput, Plan, envelope_for_receipt
from schemas.records import Receipt
from schemas.run import ExecuteResult, PolicyOutcome
from schemas.start import START_NOT_SIGNED
from starter.service.errors import MoatError
from starter.service.executions.call import Outcome, key_reused
from starter.service.executions.ingest import Prepared
from starter.service.executions.start import Launch
from starter.service.executions.wait import awaited_approval
from store import outputs, tenancy
from store.keyrings.codec import OutputSealer


async def of_result(
    sessions: async_sessionmaker[AsyncSession],
    sealer: OutputSealer,
    result: ExecuteResult,
    run: Launch,
    prepared: Prepared,
    trace_id: str,
) -> Outcome:
    """A dry run's plan, or the envelope of the run's receipt: ``replayed`` only when the
    run found the key's receipt already recorded (an idempotent hit). Attached to a run
    another request started, or to this execution's own run reset after recording, the
    answer is that run's, waited for: not a replay."""
    if result.plan is not None:
        return _planned(result.plan, prepared, trace_id)
    if result.receipt is None:
        raise MoatError(
            ErrorCode.GATEWAY_ERROR,
            "The run returned no receipt.",
            {"workflow_id": run.workflow_id},
        )
    replayed = result.replayed and result.receipt.id != run.receipt_id
    return await _finished(sessions, sealer, result.receipt, replayed, prepared, result.kept)


async def accepted(
    sessions: async_sessionmaker[AsyncSession],
    handle: Any,
    run: Launch,
    prepared: Prepared,
    trace_id: str,
) -> Outcome:
    """The ``accepted`` envelope of a run still going: the running execution's receipt id
    (its memo's: a run another request started may hold the key), and the approval it
    waits for, if any."""
    try:
        memo = await (await handle.describe()).memo()
    except RPCError:
        memo = {}
    if memo.get("input_hash", prepared.input_hash) != prepared.input_hash:
        raise key_reused(prepared.idempotency_key, memo.get("receipt_id"))
    running_id = memo.get("receipt_id", run.receipt_id)
    tenant_id = _tenant_of(handle.id)
    approval = await awaited_approval(sessions, tenant_id, handle.id) if tenant_id else None
    envelope = Envelope(
        receipt_id=running_id,
        trace_id=trace_id,
        status=EnvelopeStatus.ACCEPTED,
        idempotency_key=prepared.idempotency_key,
        workflow_id=handle.id,
        run_id=handle.result_run_id,
        approval=ApprovalRef.of(approval) if approval else None,
    )
    return Outcome(envelope)


def failed(err: WorkflowFailureError, workflow_id: str) -> MoatError:
    """The refusal of a run that failed inside Moat (a worker that refused this gateway's
    signature on it, or any other fault); the trace id identifies it."""
    if _refused_start(err):
        return MoatError(
            ErrorCode.GATEWAY_ERROR,
            "A worker refused this gateway's signature on the run: gateways and "
            "workers must share the same MOAT_START_KEYRING.",
            {"workflow_id": workflow_id, "reason": START_NOT_SIGNED},
        )
    return MoatError(
        ErrorCode.GATEWAY_ERROR,
        "The run failed inside Moat; the trace id identifies it.",
        {"workflow_id": workflow_id},
    )


async def _finished(
    sessions: async_sessionmaker[AsyncSession],
    sealer: OutputSealer,
    receipt: Receipt,
    replayed: bool,
    prepared: Prepared,
    kept: KeptOutput | None,
) -> Outcome:
    """The envelope of a run's receipt, with ``kept``, what the run kept of the answer
    (the same ``KeptOutput`` a replay unseals from Postgres: the same bytes); when the
    run did not say (it did not record the receipt itself, or keeps nothing), read back
    from where a replay will find it."""
    if receipt.input_hash != prepared.input_hash:
        raise key_reused(prepared.idempotency_key, receipt.id)
    if kept is None:
        async with tenancy.tenant_transaction(sessions, receipt.tenant_id) as session:
            kept = await outputs.find(
                session, sealer, receipt.tenant_id, receipt.id, datetime.now(UTC)
            )
    return Outcome(envelope_for_receipt(receipt, kept, replayed=replayed))


def _planned(plan: PolicyOutcome, prepared: Prepared, trace_id: str) -> Outcome:
    envelope = Envelope(
        trace_id=trace_id,
        status=EnvelopeStatus.PLANNED,
        idempotency_key=prepared.idempotency_key,
        plan=Plan(
            policy_decision_id=plan.policy_decision_id,
            decision=plan.decision.value,
            rule_hit=plan.rule_hit.value,
            mode=plan.mode.value,
            reason=plan.reason,
        ),
    )
    return Outcome(envelope)


def _tenant_of(workflow_id: str) -> str | None:
    """The tenant in an execution's workflow id (``exec/<tenant>/<digest>``)."""
    parts = workflow_id.split("/")
    return parts[1] if len(parts) >= 3 and parts[0] == "exec" else None


def _refused_start(err: WorkflowFailureError) -> bool:
    cause: BaseException | None = err.cause
    while cause is not None:
        if isinstance(cause, ApplicationError) and cause.type == START_NOT_SIGNED:
            return True
        cause = cause.__cause__
    return False
