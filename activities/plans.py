"""The steps of ``ExecutePlan``: begin (claim the key, preview the policy), prepare each
step's execution (resolve references, find its stored receipt, sign its start), keep a
checkpoint after each step, and finish (the plan's record, events and signed manifest).

Each writes in one transaction with the events it appends; events have deterministic ids,
so a retried step writes nothing twice.
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Literal

import rfc8785
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.evidence import Chain, continue_chain
from activities.execute.policy import preview
from schemas.approvals import Approval, ApprovalStatus, approval_id_for, key_actor
from schemas.capabilities import CapabilityCatalog, CapabilitySpec
from schemas.errors import ErrorCode
from schemas.events import AggregateType, EventType
from schemas.execute import ErrorBody
from schemas.identity import ExecutionRef
from schemas.ids import uuid7
from schemas.manifest import Approval as ManifestApproval
from schemas.manifest import Artifact, ManifestMetadata, RunManifest, redact_manifest, redacted_tool
from schemas.names import BEGIN_PLAN, FINISH_PLAN, PLAN_CHECKPOINT, PREPARE_STEP
from schemas.planrun import (
    PLAN_CAPABILITY,
    CheckpointInput,
    CheckpointOutput,
    PlanBeginInput,
    PlanBegun,
    PlanFinishInput,
    PlanWorkflowInput,
    StepLaunch,
    StepPrepareInput,
)
from schemas.plans import (
    PlanRequest,
    PlanStatus,
    StepState,
    StepStatus,
    Unresolved,
    compensation_key,
    resolve,
    step_key,
)
from schemas.records import Decision, ExecutionStatus, PolicyMode, Receipt, RuleHit
from schemas.redaction import redact, redacted_hash
from schemas.run import ExecuteWorkflowInput, workflow_id_for
from schemas.start import START_NOT_SIGNED, PlanClaims
from store import approvals, idempotency, manifests, outputs, plans, receipts, tenancy
from store.keyrings.codec import OutputSealer
from store.keyrings.signing import Keyring, sign_manifest
from store.keyrings.start import StartKeyring
from store.manifests import ManifestStore
from store.models import PlanRow

ACTOR = "moat.plan"
_MANIFEST_NAMESPACE = uuid.UUID("2b0f3a4c-8e1d-4c6a-9b7e-5d3c2a1f0e98")


class PlanActivities:
    """Built once in ``worker.py`` with its dependencies."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        start_keys: StartKeyring,
        sealer: OutputSealer,
        catalog: CapabilityCatalog,
        store: ManifestStore,
        keyring: Keyring,
    ) -> None:
        self._sessions = sessions
        self._start_keys = start_keys
        self._sealer = sealer
        self._catalog = catalog
        self._store = store
        self._keyring = keyring
        self._worker_id = socket.gethostname()

    def _check_signed(self, run: PlanWorkflowInput, workflow_id: str) -> None:
        """Nothing of a plan the gateway did not vouch for is acted on."""
        refusal = self._start_keys.refusal(PlanClaims.of(run, workflow_id), run.start_signature)
        if refusal is not None:
            raise ApplicationError(
                f"The plan's start is not signed by a Moat gateway for what it names "
                f"({refusal}); plans start through the gateway's API.",
                {"reason": refusal},
                type=START_NOT_SIGNED,
                non_retryable=True,
            )

    @activity.defn(name=BEGIN_PLAN)
    async def begin_plan(self, inp: PlanBeginInput) -> PlanBegun:
        """Claim the plan's key (or find the plan holding it), take up a resume, and preview
        every step's policy: whether a person must approve the plan first, and for a dry
        run the decisions it answers with."""
        run = inp.run
        self._check_signed(run, inp.workflow_id)
        plan = run.request()
        async with self._sessions.begin() as session:
            await tenancy.set_tenant(session, run.tenant_id)
            row = await plans.claim(session, _new_row(run, plan, inp))
            steps = [StepState.model_validate(s) for s in row.steps]
            if row.status != PlanStatus.ACCEPTED.value and run.resume is None:
                return await self._answered(session, row, steps)
            new = row.run_id == inp.run_id and row.id == run.plan_id and run.resume is None
            if run.resume is not None and row.status == PlanStatus.FAILED.value:
                steps = await _take_up_resume(session, row, run, inp.run_id)
            elif run.resume is not None and row.status != PlanStatus.ACCEPTED.value:
                raise ApplicationError(
                    f"plan {row.id} is {row.status}: only a failed plan resumes",
                    type=ErrorCode.PLAN_NOT_RESUMABLE,
                    non_retryable=True,
                )
            begun = await self._preview(session, row, plan, run, steps)
            if run.dry_run:
                await plans.save(
                    session,
                    row,
                    status=PlanStatus.PLANNED.value,
                    steps=[s.model_dump(mode="json") for s in begun.steps],
                    run_id=inp.run_id,
                    error=None,
                )
                return begun.model_copy(update={"status": PlanStatus.PLANNED, "finished": True})
            await _begin_events(session, row, run, inp, new=new, steps=len(steps))
            begun.outputs = await self._outputs_of(session, row.tenant_id, steps)
            return begun

    async def _answered(
        self, session: AsyncSession, row: PlanRow, steps: list[StepState]
    ) -> PlanBegun:
        """A plan that ended before this run: its answer as stored."""
        return PlanBegun(
            plan_id=row.id,
            status=PlanStatus(row.status),
            steps=steps,
            finished=True,
            error=ErrorBody.model_validate(row.error) if row.error else None,
            outputs=await self._outputs_of(session, row.tenant_id, steps),
        )

    async def _outputs_of(
        self, session: AsyncSession, tenant_id: str, steps: Sequence[StepState]
    ) -> dict[str, Any]:
        """The kept outputs of the executed steps, by step id."""
        now = datetime.now(UTC)
        found: dict[str, Any] = {}
        for step in steps:
            if step.status in (StepStatus.EXECUTED, StepStatus.COMPENSATED) and step.receipt_id:
                kept = await outputs.find(session, self._sealer, tenant_id, step.receipt_id, now)
                found[step.id] = kept.output if kept is not None else None
        return found

    async def _preview(
        self,
        session: AsyncSession,
        row: PlanRow,
        plan: PlanRequest,
        run: PlanWorkflowInput,
        steps: list[StepState],
    ) -> PlanBegun:
        """Each step's policy decision as things stand, without recording one."""
        begun = PlanBegun(plan_id=row.id, status=PlanStatus.ACCEPTED, steps=steps)
        ttls: list[int] = []
        self_ok: list[bool] = []
        for step, state in zip(plan.steps, steps, strict=True):
            spec = run.spec_of(step.id)
            if spec is None:
                continue
            seen = await preview(session, run.tenant_id, spec, run.scopes, row.id)
            begun.policy_version = seen.policy_version
            if run.dry_run:
                state.decision = {
                    "decision": seen.decision.value,
                    "rule_hit": seen.rule_hit.value,
                    "mode": seen.mode.value,
                    "reason": seen.reason,
                }
            if seen.rule_hit == RuleHit.APPROVAL_REQUIRED and seen.decision != Decision.DENY:
                ttls.append(seen.approval_ttl_seconds or 0)
                self_ok.append(seen.allow_self_approval)
        if ttls and not run.dry_run:
            begun.needs_approval = True
            begun.approval_ttl_seconds = min(ttls)
            begun.allow_self_approval = all(self_ok)
            existing = await approvals.get(session, run.tenant_id, approval_id_for(row.id))
            if existing is not None:
                begun.approval = approvals.to_approval(existing)
        return begun

    @activity.defn(name=PREPARE_STEP)
    async def prepare_step(self, inp: StepPrepareInput) -> StepLaunch:
        """A step's (or its compensation's) execution: its references resolved, its input
        checked, the receipt its key already holds found; otherwise its start signed for
        the plan's caller, under the receipt id its key was claimed with if it was."""
        run = inp.run
        self._check_signed(run, inp.workflow_id)
        plan = run.request()
        step = next(s for s in plan.steps if s.id == inp.step_id)
        call = step if inp.kind == "step" else step.compensate
        assert call is not None and run.idempotency_key is not None
        key = (
            step_key(run.idempotency_key, step.id, inp.attempt)
            if inp.kind == "step"
            else compensation_key(run.idempotency_key, step.id)
        )
        launch = StepLaunch(step_id=step.id, kind=inp.kind, idempotency_key=key)
        try:
            value = resolve(call.input, inp.outputs)
        except Unresolved as err:
            return launch.model_copy(update={"skipped": str(err)})
        spec = run.spec_of(step.id, inp.kind)
        refusal = self._refusal(spec, call.capability_id, value)
        if refusal is not None:
            return launch.model_copy(update={"error": refusal})
        assert spec is not None
        payload = {
            "capability_id": call.capability_id,
            "capability_version": call.capability_version,
            "connection_id": call.connection_id,
            "input": value,
        }
        async with self._sessions.begin() as session:
            await tenancy.set_tenant(session, run.tenant_id)
            found = await idempotency.find_live_claim(
                session, run.tenant_id, key, datetime.now(UTC)
            )
            if found is not None and found[1] is not None:
                receipt = found[1]
                kept = await outputs.find(
                    session, self._sealer, run.tenant_id, receipt.id, datetime.now(UTC)
                )
                return launch.model_copy(
                    update={
                        "receipt_id": receipt.id,
                        "receipt": receipt,
                        "output": kept.output if kept is not None else None,
                    }
                )
        receipt_id = found[0].receipt_id if found is not None else str(uuid7())
        workflow_id = workflow_id_for(run.tenant_id, key)
        arg = ExecuteWorkflowInput(
            ref=ExecutionRef(
                receipt_id=receipt_id,
                tenant_id=run.tenant_id,
                idempotency_key=key,
                input_hash=redacted_hash(payload),
                connection_id=call.connection_id,
            ),
            capability=spec,
            input=value,
            request_id=str(uuid7()),
            trace_id=run.trace_id,
            submitted_at=datetime.now(UTC),
            idempotency_ttl_seconds=run.idempotency_ttl_seconds,
            local_activities=run.local_activities,
            scopes=list(run.scopes),
            api_key_id=run.api_key_id,
            plan_approval_id=inp.approval_id,
        )
        return launch.model_copy(
            update={
                "receipt_id": receipt_id,
                "workflow_id": workflow_id,
                "start": self._start_keys.signed(arg, workflow_id),
            }
        )

    def _refusal(
        self, spec: CapabilitySpec | None, capability_id: str, value: dict[str, Any]
    ) -> ErrorBody | None:
        """Why a step's resolved input cannot run (None: it can)."""
        if spec is None:
            return ErrorBody(
                code=ErrorCode.CAPABILITY_NOT_FOUND,
                message=f"No capability {capability_id!r} in the catalog.",
            )
        try:
            self._catalog.input_model(spec).model_validate(value)
            rfc8785.dumps(value)
        except (ValidationError, rfc8785.CanonicalizationError) as err:
            return ErrorBody(
                code=ErrorCode.SCHEMA_VALIDATION_FAILED,
                message=f"The step's input, its references resolved, does not match "
                f"{spec.id}'s input schema.",
                details={"errors": [str(err)[:500]]},
            )
        return None

    @activity.defn(name=PLAN_CHECKPOINT)
    async def checkpoint(self, inp: CheckpointInput) -> CheckpointOutput:
        """Where the plan stands after a step: saved with its ``RUN_CHECKPOINT_CREATED``
        (the receipts so far), its ``STEP_SKIPPED`` or ``STEP_COMPENSATED``; and the kept
        output of a step answered by a run that did not record it (``output_of``)."""
        run = inp.run
        async with self._sessions.begin() as session:
            await tenancy.set_tenant(session, run.tenant_id)
            row = await plans.get(session, run.tenant_id, inp.plan_id, lock=True)
            assert row is not None
            await plans.save(
                session,
                row,
                status=PlanStatus.ACCEPTED.value,
                steps=[s.model_dump(mode="json") for s in inp.steps],
                run_id=inp.run_id,
                error=None,
            )
            chain = continue_chain(run.tenant_id, row.id, inp.run_id, ACTOR)
            _checkpoint_event(chain, inp)
            await chain.append(session)
            output = None
            if inp.output_of is not None:
                kept = await outputs.find(
                    session, self._sealer, run.tenant_id, inp.output_of, datetime.now(UTC)
                )
                output = kept.output if kept is not None else None
        return CheckpointOutput(output=output)

    @activity.defn(name=FINISH_PLAN)
    async def finish_plan(self, inp: PlanFinishInput) -> str:
        """The plan's end: its record, its closing events, and its signed manifest (the
        steps' tool calls in order, what they created, and what failed and was undone).
        Returns the manifest's path."""
        run = inp.run
        async with self._sessions.begin() as session:
            await tenancy.set_tenant(session, run.tenant_id)
            row = await plans.get(session, run.tenant_id, inp.plan_id, lock=True)
            assert row is not None
            step_receipts = {}
            for step in inp.steps:
                for receipt_id in (step.receipt_id, step.compensation_receipt_id):
                    if receipt_id:
                        found = await receipts.get_receipt(session, run.tenant_id, receipt_id)
                        if found is not None:
                            step_receipts[receipt_id] = found
            await plans.save(
                session,
                row,
                status=inp.status.value,
                steps=[s.model_dump(mode="json") for s in inp.steps],
                run_id=inp.run_id,
                error=None if inp.error is None else inp.error.model_dump(mode="json"),
            )
            chain = continue_chain(run.tenant_id, row.id, inp.run_id, ACTOR)
            _finish_events(chain, inp)
            await chain.append(session)
        manifest = sign_manifest(
            self._manifest(inp, row, step_receipts), self._keyring, signer="moat"
        )
        path, digest = await asyncio.to_thread(self._store.write_or_get, manifest)
        signature = manifest.signatures[-1]
        manifest_id = str(uuid.uuid5(_MANIFEST_NAMESPACE, f"{row.id}|{inp.run_id}"))
        async with self._sessions.begin() as session:
            await tenancy.set_tenant(session, run.tenant_id)
            await manifests.index(
                session,
                id=manifest_id,
                tenant_id=run.tenant_id,
                receipt_id=row.id,
                run_id=inp.run_id,
                path=str(path),
                sha256=digest,
                kid=signature.kid or "",
                alg=signature.algorithm,
                replayed=False,
                outcome=inp.status.value,
            )
        return str(path)

    def _manifest(
        self, inp: PlanFinishInput, row: PlanRow, step_receipts: dict[str, Receipt]
    ) -> RunManifest:
        """The plan's manifest, in the shape of the design documents' failed-execution
        example: the calls in the order they ran (each step's input as resolved, then the
        undos), outputs per step, and for a failure the partial completion and what was (or
        must be) rolled back."""
        run = inp.run
        plan = run.request()
        tools = []
        undos = []
        artifacts: list[Artifact] = []
        per_step: dict[str, Any] = {}
        resolved = {(c["step"], c["kind"]): c["input"] for c in inp.calls if c["input"]}
        for step, state in zip(plan.steps, inp.steps, strict=True):
            receipt = step_receipts.get(state.receipt_id or "")
            per_step[step.id] = {
                "status": state.status.value,
                "receipt_id": state.receipt_id,
                "output_hash": receipt.output_hash if receipt else None,
                "error_code": state.error.code if state.error else None,
            }
            if receipt is None:
                continue
            ok = receipt.status == ExecutionStatus.SUCCESS
            tools.append(
                redacted_tool(
                    step.capability_id,
                    receipt.timestamp,
                    resolved.get((step.id, "step"), step.input),
                    "success" if ok else "failure",
                    data=inp.outputs.get(step.id) if ok else None,
                    error=None if ok else f"{receipt.error_code}",
                    idempotency_token=receipt.idempotency_key,
                )
            )
            if ok:
                artifacts.append(_artifact(step.id, step.capability_id, receipt, inp.outputs))
            undo = step_receipts.get(state.compensation_receipt_id or "")
            if undo is not None and step.compensate is not None:
                undos.append(
                    redacted_tool(
                        step.compensate.capability_id,
                        undo.timestamp,
                        resolved.get((step.id, "compensate"), step.compensate.input),
                        "success" if undo.status == ExecutionStatus.SUCCESS else "failure",
                        error=undo.error_code,
                        idempotency_token=undo.idempotency_key,
                    )
                )
        # The calls in the order they ran: the steps, then their undos, last step first.
        tools += reversed(undos)
        result: dict[str, Any] = {"plan_id": row.id, "status": inp.status.value, "steps": per_step}
        if inp.status == PlanStatus.FAILED:
            done = [s.id for s in inp.steps if s.status == StepStatus.EXECUTED]
            undone = [s.id for s in inp.steps if s.status == StepStatus.COMPENSATED]
            result["partial_completion"] = {
                "completed_steps": done + undone,
                "total_steps": len(inp.steps),
            }
            result["rollback_required"] = bool(done) and not inp.rolled_back
            result["rolled_back"] = undone
            if inp.error is not None:
                result["error_code"] = inp.error.code
            if done and any(p.compensate is not None for p in plan.steps):
                result["compensating_action_ref"] = f"/v1/plans/{row.id}"
        now = datetime.now(UTC)
        return redact_manifest(
            RunManifest(
                run_id=inp.run_id,
                tenant_id=run.tenant_id,
                idempotency_key=run.idempotency_key or "",
                trace_id=run.trace_id,
                correlation_id=row.id,
                inputs_sha=row.plan_hash,
                executed_at=now,
                attempt=len(row.resumes),
                replayed=False,
                tools=tools,
                artifacts=artifacts,
                outputs=result,
                signatures=[],
                policy_mode=PolicyMode.STANDARD,
                approvals=_approvals(inp.approval),
                metadata=ManifestMetadata(
                    message_id=run.request_id,
                    priority=5,
                    submitted_at=run.submitted_at,
                    execution_duration_ms=max(0, int((now - run.submitted_at).total_seconds())),
                    worker_id=self._worker_id,
                    plan=True,
                    on_failure=plan.on_failure.value,
                    cancelled_by=inp.cancelled_by,
                ),
            )
        )


def _new_row(run: PlanWorkflowInput, plan: PlanRequest, inp: PlanBeginInput) -> PlanRow:
    return PlanRow(
        id=run.plan_id,
        tenant_id=run.tenant_id,
        idempotency_key=run.idempotency_key,
        plan_hash=run.plan_hash,
        workflow_id=inp.workflow_id,
        run_id=inp.run_id,
        status=PlanStatus.ACCEPTED.value,
        on_failure=plan.on_failure.value,
        document=redact(plan.document()),
        steps=[
            StepState(id=s.id, capability_id=s.capability_id).model_dump(mode="json")
            for s in plan.steps
        ],
        trace_id=run.trace_id,
        requested_by=key_actor(run.api_key_id) if run.api_key_id else "moat",
    )


async def _take_up_resume(
    session: AsyncSession, row: PlanRow, run: PlanWorkflowInput, run_id: str
) -> list[StepState]:
    """A failed plan resumed: the step that failed runs again under its next key; steps
    after it that never ran (pending, skipped) run as they come; executed ones stay."""
    assert run.resume is not None
    steps = [StepState.model_validate(s) for s in row.steps]
    for state in steps:
        if state.status == StepStatus.FAILED:
            state.status = StepStatus.PENDING
            state.attempt += 1
            state.error = None
            state.receipt_id = None
        elif state.status == StepStatus.SKIPPED:
            state.status = StepStatus.PENDING
    await plans.add_resume(session, row, {**run.resume.model_dump(mode="json"), "run_id": run_id})
    await plans.save(
        session,
        row,
        status=PlanStatus.ACCEPTED.value,
        steps=[s.model_dump(mode="json") for s in steps],
        run_id=run_id,
        error=None,
    )
    return steps


async def _begin_events(
    session: AsyncSession,
    row: PlanRow,
    run: PlanWorkflowInput,
    inp: PlanBeginInput,
    *,
    new: bool,
    steps: int,
) -> None:
    """The plan's intake and start: ``SIGNAL_RECEIVED`` (the gateway accepted it),
    ``SIGNAL_PROCESSING_STARTED`` and ``RUN_STARTED``; a later run (a reset, a resume)
    adds its own ``RUN_STARTED``."""
    chain = continue_chain(run.tenant_id, row.id, inp.run_id, ACTOR)
    if new:
        chain.add(
            EventType.SIGNAL_RECEIVED,
            AggregateType.SIGNAL,
            row.id,
            request_id=run.request_id,
            trace_id=run.trace_id,
            submitted_at=run.submitted_at.isoformat(),
            kind="plan",
            steps=steps,
        )
        chain.add(EventType.SIGNAL_PROCESSING_STARTED, AggregateType.SIGNAL, row.id)
    data: dict[str, Any] = {
        "workflow_id": inp.workflow_id,
        "capability_id": PLAN_CAPABILITY,
        "steps": steps,
    }
    if run.resume is not None:
        data["resumed_by"] = run.resume.by
        data["note"] = run.resume.note
    chain.add(EventType.RUN_STARTED, AggregateType.RUN, row.id, **data)
    await chain.append(session)


def _checkpoint_event(chain: Chain, inp: CheckpointInput) -> None:
    step = next(s for s in inp.steps if s.id == inp.step_id)
    if inp.event == "skipped":
        chain.add(
            EventType.STEP_SKIPPED,
            AggregateType.STEP,
            f"{inp.plan_id}:{step.id}",
            f"skipped:{step.id}:{step.attempt}",
            step=step.id,
            reason=inp.reason,
        )
        return
    if inp.event == "compensated":
        chain.add(
            EventType.STEP_COMPENSATED,
            AggregateType.STEP,
            f"{inp.plan_id}:{step.id}",
            f"compensated:{step.id}",
            step=step.id,
            receipt_id=step.receipt_id,
            compensation_receipt_id=step.compensation_receipt_id,
        )
    chain.add(
        EventType.RUN_CHECKPOINT_CREATED,
        AggregateType.PLAN,
        inp.plan_id,
        f"checkpoint:{inp.event}:{step.id}:{step.attempt}",
        step=step.id,
        receipts={s.id: s.receipt_id for s in inp.steps if s.receipt_id},
        statuses={s.id: s.status.value for s in inp.steps},
    )


def _finish_events(chain: Chain, inp: PlanFinishInput) -> None:
    if inp.cancelled_by is not None:
        chain.add(
            EventType.RUN_CANCELLED,
            AggregateType.RUN,
            inp.plan_id,
            cancelled_by=inp.cancelled_by,
            steps={s.id: s.status.value for s in inp.steps},
        )
    if inp.status == PlanStatus.EXECUTED:
        chain.add(EventType.RUN_COMPLETED, AggregateType.RUN, inp.plan_id)
        chain.add(EventType.SIGNAL_PROCESSED, AggregateType.SIGNAL, inp.plan_id)
    else:
        code = inp.error.code if inp.error else None
        chain.add(EventType.RUN_FAILED, AggregateType.RUN, inp.plan_id, error_code=code)
        chain.add(
            EventType.SIGNAL_PROCESSING_FAILED, AggregateType.SIGNAL, inp.plan_id, error_code=code
        )


def _artifact(
    step_id: str, capability_id: str, receipt: Receipt, step_outputs: dict[str, Any]
) -> Artifact:
    """What a step created, where it is: a provider's object (an issue's URL, a message's
    channel and timestamp) as a state change, anything else as the API's answer."""
    output = step_outputs.get(step_id)
    location = f"moat:receipt/{receipt.id}"
    kind: Literal["api_response", "state_change"] = "api_response"
    if isinstance(output, dict):
        if isinstance(output.get("html_url"), str):
            location, kind = output["html_url"], "state_change"
        elif isinstance(output.get("channel"), str) and isinstance(output.get("ts"), str):
            location, kind = f"slack:{output['channel']}/{output['ts']}", "state_change"
    return Artifact(
        artifact_id=f"{step_id}:{receipt.id}",
        type=kind,
        location=location,
        checksum=receipt.output_hash,
        created_at=receipt.timestamp,
        metadata={"step": step_id, "capability_id": capability_id},
    )


def _approvals(approval: Approval | None) -> list[ManifestApproval]:
    if (
        approval is None
        or approval.status != ApprovalStatus.APPROVED
        or approval.decided_at is None
        or approval.decided_by is None
    ):
        return []
    return [
        ManifestApproval(
            approver=approval.decided_by,
            approved_at=approval.decided_at,
            approval_type="manual",
            reason=approval.comment,
            approved_digest=approval.approved_digest,
            policy_version=approval.policy_version,
        )
    ]
