"""``ExecutePlan``: several capability calls as one durable run.

Each step is a child ``ExecuteCapability`` under the key ``<plan key>/<step id>``, so each
keeps every guarantee an execution has (policy, scopes, budgets, receipts, events, signed
manifest, reconcile); a reset, retried or resumed plan repeats no completed step, because
the step's key finds its stored receipt. Between steps the plan keeps a checkpoint; a
failure stops it or undoes the completed steps (``compensate``), in reverse order.

Deterministic orchestration only; activities are named, not imported.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import (
    RetryPolicy,
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import ApplicationError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from schemas.approvals import (
        Approval,
        ApprovalRecorded,
        ApprovalRecordInput,
        ApprovalRequestInput,
        ApprovalStatus,
        ApprovalVerdict,
        key_actor,
    )
    from schemas.errors import ErrorCode
    from schemas.execute import ErrorBody
    from schemas.identity import ExecutionRef
    from schemas.names import (
        AWAITING_APPROVAL,
        BEGIN_PLAN,
        CANCEL_PLAN_SIGNAL,
        CAPABILITY_ATTRIBUTE,
        DECIDE_APPROVAL_UPDATE,
        EXECUTE_WORKFLOW,
        FINISH_PLAN,
        IDEMPOTENCY_KEY_ATTRIBUTE,
        IDEMPOTENCY_KEY_ATTRIBUTE_LENGTH,
        PLAN_CHECKPOINT,
        PLAN_WORKFLOW,
        PREPARE_STEP,
        RECEIPT_ATTRIBUTE,
        RECORD_APPROVAL,
        REQUEST_APPROVAL,
        STATUS_ATTRIBUTE,
        TENANT_ATTRIBUTE,
    )
    from schemas.planrun import (
        PLAN_CAPABILITY,
        CallKind,
        CheckpointInput,
        CheckpointOutput,
        PlanBeginInput,
        PlanBegun,
        PlanFinishInput,
        PlanResult,
        PlanWorkflowInput,
        StepLaunch,
        StepPrepareInput,
    )
    from schemas.plans import (
        CancelRequest,
        OnFailure,
        PlanRequest,
        PlanStatus,
        StepState,
        StepStatus,
        when_holds,
    )
    from schemas.records import ExecutionStatus, Receipt
    from schemas.redaction import redact
    from schemas.run import ExecuteResult
    from workflows.approval import ApprovalGate
    from workflows.fairness import tenant_priority

STATUS_ATTR = SearchAttributeKey.for_keyword(STATUS_ATTRIBUTE)
BOOKKEEPING_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=5),
)
BOOKKEEPING_TIMEOUT = timedelta(seconds=30)
BOOKKEEPING_DEADLINE = timedelta(minutes=10)


@workflow.defn(name=PLAN_WORKFLOW)
class ExecutePlan:
    def __init__(self) -> None:
        self._run: PlanWorkflowInput | None = None
        self._plan_id = ""
        self._states: list[StepState] = []
        self._outputs: dict[str, Any] = {}
        self._cancelled_by: str | None = None
        self._finished = False
        self._approval_gate = ApprovalGate(subject="plan")
        # Each call as it ran (resolved input), in order: the manifest's tools.
        self._calls: list[dict[str, Any]] = []

    @workflow.run
    async def run(self, run: PlanWorkflowInput) -> PlanResult:
        self._run = run
        plan = run.request()
        info = workflow.info()
        begin = PlanBeginInput(run=run, workflow_id=info.workflow_id, run_id=info.run_id)
        begun: PlanBegun = await self._bookkeeping(BEGIN_PLAN, begin, PlanBegun)
        self._plan_id, self._states, self._outputs = begun.plan_id, begun.steps, begun.outputs
        if begun.finished:
            return self._ended(self._answer(begun.status, begun.error, replayed=not run.dry_run))
        approval = None
        failure: ErrorBody | None = None
        try:
            if begun.needs_approval:
                approval = await self._approval(run, begun)
            if approval is None or approval.status == ApprovalStatus.APPROVED:
                failure = await self._steps(run, plan, approval)
            else:
                failure = ErrorBody(
                    code=f"approval_{approval.status.value}",
                    message=f"The plan's approval {approval.id} was "
                    f"{approval.status.value}: no step ran.",
                )
        except asyncio.CancelledError:
            self._cancelled_by = self._cancelled_by or "temporal"
            if self._approval_gate.pending is not None:
                await self._approval_gate.expire(self._expire)
        if self._cancelled_by is not None:
            failure = ErrorBody(
                code=ErrorCode.PLAN_CANCELLED,
                message=f"The plan was cancelled by {self._cancelled_by}; steps not started "
                "stay pending.",
            )
        rolled_back = False
        if failure is not None and plan.on_failure == OnFailure.COMPENSATE:
            rolled_back = await self._compensate(run, plan)
        status = PlanStatus.EXECUTED if failure is None else PlanStatus.FAILED
        return await self._finish(run, status, failure, approval, rolled_back=rolled_back)

    async def _steps(
        self, run: PlanWorkflowInput, plan: PlanRequest, approval: Approval | None
    ) -> ErrorBody | None:
        """Run the steps in order; the failure that ends the plan, if one does."""
        approval_id = approval.id if approval is not None else None
        for index, step in enumerate(plan.steps):
            state = self._states[index]
            if state.status in (StepStatus.EXECUTED, StepStatus.COMPENSATED):
                continue  # a reset or a resume: done before, not repeated
            if self._cancelled_by is not None:
                return None
            self._show(f"step {index + 1}/{len(plan.steps)} {step.id}: {step.capability_id}")
            before = {s.id: s.status for s in self._states[:index]}
            if not when_holds(step.when, before):
                assert step.when is not None
                reason = f"{step.when.step} ended {before.get(step.when.step)}"
                await self._skip(run, state, reason)
                continue
            launch = await self._prepare(run, step.id, "step", state.attempt, approval_id)
            if launch.skipped is not None:
                await self._skip(run, state, launch.skipped)
                continue
            state.idempotency_key = launch.idempotency_key
            self._note_call(launch)
            receipt, output, error = await self._call(launch)
            state.receipt_id = receipt.id if receipt is not None else None
            if error is None:
                state.status = StepStatus.EXECUTED
                self._outputs[step.id] = output
            else:
                state.status, state.error = StepStatus.FAILED, error
            await self._checkpoint(run, state.id)
            if error is not None and not _handled(plan, index):
                return error.model_copy(update={"details": {**error.details, "step": step.id}})
        return None

    def _note_call(self, launch: StepLaunch) -> None:
        """The call about to run (or already answered), with its input as resolved."""
        start = launch.start
        self._calls.append(
            {
                "step": launch.step_id,
                "kind": launch.kind,
                "input": start.input if start is not None else None,
            }
        )

    async def _call(self, launch: StepLaunch) -> tuple[Receipt | None, Any, ErrorBody | None]:
        """A step's execution: its stored receipt, or its child run started and waited for.
        The receipt, the output and, unless it succeeded, the error."""
        if launch.error is not None:
            return None, None, launch.error
        receipt, output = launch.receipt, launch.output
        if receipt is None:
            receipt, output = await self._child(launch)
        if receipt is None:
            return (
                None,
                None,
                ErrorBody(
                    code=ErrorCode.GATEWAY_ERROR,
                    message=f"The execution of step {launch.step_id} ended without a receipt.",
                ),
            )
        if receipt.status == ExecutionStatus.SUCCESS:
            return receipt, output, None
        code = receipt.error_code or receipt.status.value
        return (
            receipt,
            None,
            ErrorBody(
                code=code,
                message=f"Step {launch.step_id} failed: {code} (receipt {receipt.id}).",
                details={"receipt_id": receipt.id},
            ),
        )

    async def _child(self, launch: StepLaunch) -> tuple[Receipt | None, Any]:
        """The step's child run, waited for even when the plan is cancelled meanwhile: a
        step calling its provider finishes and is recorded; nothing after it starts."""
        assert launch.start is not None and launch.workflow_id is not None
        start = launch.start
        cap = start.capability
        try:
            handle = await workflow.start_child_workflow(
                EXECUTE_WORKFLOW,
                start,
                id=launch.workflow_id,
                result_type=ExecuteResult,
                task_queue=workflow.info().task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
                cancellation_type=workflow.ChildWorkflowCancellationType.ABANDON,
                static_summary=f"{cap.id}@{cap.version} · receipt {start.ref.receipt_id} "
                f"· plan {self._plan_id} step {launch.step_id}",
                search_attributes=_attributes(start.ref.tenant_id, cap.id, start.ref),
                priority=tenant_priority(start.ref.tenant_id),
            )
            try:
                result: ExecuteResult = await asyncio.shield(handle)
            except asyncio.CancelledError:
                self._cancelled_by = self._cancelled_by or "temporal"
                result = await handle
        except ChildWorkflowError as err:
            cause = err.cause
            failed = None
            if isinstance(cause, ApplicationError):
                failed = ExecuteResult.of_failure(cause.type, cause.details)
            if failed is None:
                return None, None
            result = failed
        receipt = result.receipt
        if receipt is None:
            return None, None
        if result.kept is not None:
            return receipt, result.kept.output
        if receipt.status != ExecutionStatus.SUCCESS:
            return receipt, None
        assert self._run is not None
        fetched: CheckpointOutput = await self._bookkeeping(
            PLAN_CHECKPOINT,
            self._checkpoint_input(self._run, launch.step_id, output_of=receipt.id),
            CheckpointOutput,
        )
        return receipt, fetched.output

    async def _compensate(self, run: PlanWorkflowInput, plan: PlanRequest) -> bool:
        """Undo each executed step that declares ``compensate``, last first, each undo an
        execution of its own (key ``<plan key>/<step id>/compensate``: once). Whether every
        executed step was undone."""
        undone = True
        for index in reversed(range(len(plan.steps))):
            step, state = plan.steps[index], self._states[index]
            if state.status != StepStatus.EXECUTED:
                continue
            if step.compensate is None:
                undone = False
                continue
            self._show(f"compensating step {step.id}: {step.compensate.capability_id}")
            launch = await self._prepare(run, step.id, "compensate", 0, None)
            if launch.skipped is not None:
                state.compensation_error = ErrorBody(
                    code=ErrorCode.PLAN_INVALID, message=launch.skipped
                )
                undone = False
                continue
            self._note_call(launch)
            receipt, _, error = await self._call(launch)
            state.compensation_receipt_id = receipt.id if receipt is not None else None
            if error is None:
                state.status = StepStatus.COMPENSATED
                await self._checkpoint(run, step.id, event="compensated")
            else:
                state.compensation_error = error
                undone = False
                await self._checkpoint(run, step.id)
        return undone

    async def _prepare(
        self,
        run: PlanWorkflowInput,
        step_id: str,
        kind: CallKind,
        attempt: int,
        approval_id: str | None,
    ) -> StepLaunch:
        info = workflow.info()
        prepared: StepLaunch = await self._bookkeeping(
            PREPARE_STEP,
            StepPrepareInput(
                run=run,
                workflow_id=info.workflow_id,
                run_id=info.run_id,
                step_id=step_id,
                kind=kind,
                attempt=attempt,
                outputs=self._outputs,
                approval_id=approval_id,
            ),
            StepLaunch,
        )
        return prepared

    async def _skip(self, run: PlanWorkflowInput, state: StepState, reason: str) -> None:
        state.status = StepStatus.SKIPPED
        await self._checkpoint(run, state.id, event="skipped", reason=reason)

    def _checkpoint_input(
        self,
        run: PlanWorkflowInput,
        step_id: str,
        *,
        event: Any = "checkpoint",
        reason: str = "",
        output_of: str | None = None,
    ) -> CheckpointInput:
        info = workflow.info()
        return CheckpointInput(
            run=run,
            plan_id=self._plan_id,
            workflow_id=info.workflow_id,
            run_id=info.run_id,
            steps=self._states,
            step_id=step_id,
            event=event,
            reason=reason,
            output_of=output_of,
        )

    async def _checkpoint(
        self, run: PlanWorkflowInput, step_id: str, *, event: Any = "checkpoint", reason: str = ""
    ) -> None:
        await self._bookkeeping(
            PLAN_CHECKPOINT,
            self._checkpoint_input(run, step_id, event=event, reason=reason),
            CheckpointOutput,
        )

    async def _finish(
        self,
        run: PlanWorkflowInput,
        status: PlanStatus,
        error: ErrorBody | None,
        approval: Approval | None,
        *,
        rolled_back: bool = False,
    ) -> PlanResult:
        info = workflow.info()
        self._finished = True
        path: str = await self._bookkeeping(
            FINISH_PLAN,
            PlanFinishInput(
                run=run,
                plan_id=self._plan_id,
                workflow_id=info.workflow_id,
                run_id=info.run_id,
                status=status,
                steps=self._states,
                error=error,
                cancelled_by=self._cancelled_by,
                approval=approval,
                outputs=self._outputs,
                rolled_back=rolled_back,
                calls=self._calls,
            ),
            str,
        )
        result = self._answer(status, error, approval=approval)
        result.manifest_path = path
        return self._ended(result)

    def _answer(
        self,
        status: PlanStatus,
        error: ErrorBody | None,
        *,
        approval: Approval | None = None,
        replayed: bool = False,
    ) -> PlanResult:
        return PlanResult(
            plan_id=self._plan_id,
            status=status,
            steps=self._states,
            outputs=self._outputs,
            error=error,
            approval=approval,
            replayed=replayed,
        )

    def _ended(self, result: PlanResult) -> PlanResult:
        """A failed plan's run ends failed (the Web UI shows it), carrying its answer."""
        workflow.upsert_search_attributes([STATUS_ATTR.value_set(result.status.value)])
        self._show(result.status.value + (f" · {result.error.code}" if result.error else ""))
        if result.status != PlanStatus.FAILED:
            return result
        code = result.error.code if result.error else ErrorCode.UNKNOWN
        raise ApplicationError(
            f"plan failed: {code}; plan {result.plan_id}", result, type=code, non_retryable=True
        )

    # A person's approval of the whole plan.

    async def _ask(self, run: PlanWorkflowInput, begun: PlanBegun) -> Approval:
        info = workflow.info()
        requested: Approval = await self._bookkeeping(
            REQUEST_APPROVAL,
            ApprovalRequestInput(
                ref=ExecutionRef(
                    receipt_id=begun.plan_id,
                    tenant_id=run.tenant_id,
                    idempotency_key=run.idempotency_key or "",
                    input_hash=run.plan_hash,
                    workflow_id=info.workflow_id,
                    run_id=info.run_id,
                ),
                capability_id=PLAN_CAPABILITY,
                capability_version="1",
                policy_version=begun.policy_version,
                requested_by=key_actor(run.api_key_id),
                ttl_seconds=begun.approval_ttl_seconds,
                allow_self_approval=begun.allow_self_approval,
                input=redact(run.plan),
            ),
            Approval,
        )
        return requested

    async def _approval(self, run: PlanWorkflowInput, begun: PlanBegun) -> Approval:
        """The plan's approval: asked for (once: a reset finds it) and waited for."""
        approval = begun.approval or await self._ask(run, begun)
        if approval.status == ApprovalStatus.PENDING:
            approval = await self._await_decision(approval)
        return approval

    async def _await_decision(self, requested: Approval) -> Approval:
        """Wait, durably, for a person's decision on the plan until the approval expires
        (or the plan is cancelled: the approval then expires unanswered)."""
        workflow.upsert_search_attributes([STATUS_ATTR.value_set(AWAITING_APPROVAL)])
        self._show(f"awaiting approval {requested.id} until {requested.expires_at}")
        return await self._approval_gate.wait(
            requested, self._expire, stop=lambda: self._cancelled_by is not None
        )

    async def _expire(self, verdict: ApprovalVerdict) -> ApprovalRecorded:
        recorded: ApprovalRecorded = await self._bookkeeping(
            RECORD_APPROVAL, self._record_input(verdict), ApprovalRecorded
        )
        return recorded

    def _record_input(self, verdict: ApprovalVerdict) -> ApprovalRecordInput:
        assert self._run is not None
        return ApprovalRecordInput(
            tenant_id=self._run.tenant_id,
            receipt_id=self._plan_id,
            run_id=workflow.info().run_id,
            verdict=verdict,
        )

    @workflow.update(name=DECIDE_APPROVAL_UPDATE)
    async def decide_approval(self, verdict: ApprovalVerdict) -> Approval:
        """A person's decision on the plan's approval, as recorded (see ExecuteCapability)."""
        recorded: ApprovalRecorded = await self._bookkeeping(
            RECORD_APPROVAL, self._record_input(verdict), ApprovalRecorded
        )
        return self._approval_gate.keep(recorded)

    @decide_approval.validator
    def _check_decision(self, verdict: ApprovalVerdict) -> None:
        self._approval_gate.check(verdict)

    # An operator's cancel.

    @workflow.signal(name=CANCEL_PLAN_SIGNAL)
    def cancel_plan(self, by: str, request: CancelRequest) -> None:
        """Stop the plan: a step calling its provider finishes, no later step starts (a
        plan waiting for approval stops waiting). A plan that has finished ignores it."""
        if self._finished or self._cancelled_by is not None:
            return
        self._cancelled_by = by if not request.note else f"{by} ({request.note[:200]})"

    def _show(self, doing: str) -> None:
        workflow.set_current_details(f"plan {self._plan_id} · {doing}")

    async def _bookkeeping(self, name: str, arg: Any, result_type: type[Any]) -> Any:
        """A step of the plan's own: a local activity (inside the workflow task, as an
        execution's bookkeeping) unless the gateway runs them as regular activities."""
        assert self._run is not None
        options: dict[str, Any] = {
            "result_type": result_type,
            "start_to_close_timeout": BOOKKEEPING_TIMEOUT,
            "schedule_to_close_timeout": BOOKKEEPING_DEADLINE,
            "retry_policy": BOOKKEEPING_RETRY,
        }
        if self._run.local_activities:
            return await workflow.execute_local_activity(name, arg, **options)
        return await workflow.execute_activity(
            name, arg, priority=tenant_priority(self._run.tenant_id), **options
        )


def _handled(plan: PlanRequest, index: int) -> bool:
    """Whether a later step runs on this step's failure (its ``when`` names it failed):
    then the failure does not end the plan."""
    failed = plan.steps[index].id
    return any(
        s.when is not None and s.when.step == failed and StepStatus.FAILED in s.when.status
        for s in plan.steps[index + 1 :]
    )


def _attributes(tenant_id: str, capability_id: str, ref: ExecutionRef) -> TypedSearchAttributes:
    """What a step's run is found by, as an execution started by the gateway is."""
    key = ref.idempotency_key[:IDEMPOTENCY_KEY_ATTRIBUTE_LENGTH]
    return TypedSearchAttributes(
        [
            SearchAttributePair(SearchAttributeKey.for_keyword(TENANT_ATTRIBUTE), tenant_id),
            SearchAttributePair(
                SearchAttributeKey.for_keyword(CAPABILITY_ATTRIBUTE), capability_id
            ),
            SearchAttributePair(SearchAttributeKey.for_keyword(IDEMPOTENCY_KEY_ATTRIBUTE), key),
            SearchAttributePair(SearchAttributeKey.for_keyword(RECEIPT_ATTRIBUTE), ref.receipt_id),
        ]
    )
