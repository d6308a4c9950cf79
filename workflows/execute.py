"""``ExecuteCapability``: policy check → adapter call → record outcome → receipt.

Deterministic orchestration only. Activities are named, not imported; every input they
need was resolved at ingest and travels in ``ExecuteWorkflowInput``.
"""

from __future__ import annotations

from datetime import timedelta
from types import MappingProxyType
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import ActivityError, ApplicationError, RetryState, TimeoutError

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
    from schemas.capabilities import EffectType
    from schemas.errors import ErrorCode
    from schemas.execute import EnvelopeStatus
    from schemas.identity import ExecutionRef
    from schemas.names import (
        AWAITING_APPROVAL,
        CALL_ADAPTER,
        CHECK_POLICY,
        DECIDE_APPROVAL_UPDATE,
        EXECUTE_WORKFLOW,
        PROVIDER_RESPONSE,
        RECORD_APPROVAL,
        RECORD_OUTCOME,
        RECORD_RUN,
        REFUSED_TARGET,
        REQUEST_APPROVAL,
        STATUS_ATTRIBUTE,
        WRITE_MANIFEST,
    )
    from schemas.records import (
        OUTCOME_UNKNOWN,
        Decision,
        ErrorTaxonomy,
        ExecutionStatus,
        Receipt,
        RuleHit,
    )
    from schemas.redaction import redact
    from schemas.run import (
        ADAPTER_TIMEOUT_SLACK,
        BOOKKEEPING_DEADLINE,
        AdapterInput,
        AdapterOutput,
        ExecuteResult,
        ExecuteWorkflowInput,
        ManifestInput,
        ManifestParts,
        ManifestRef,
        PolicyInput,
        PolicyOutcome,
        RecordBasis,
        RecordedRun,
        RecordInput,
        RecordRunInput,
        SuccessRecord,
        ToolCall,
        downstream_idempotency_key,
        succeeded,
    )
    from schemas.start import input_digest
    from workflows.approval import ApprovalGate
    from workflows.fairness import tenant_priority

STATUS_ATTR = SearchAttributeKey.for_keyword(STATUS_ATTRIBUTE)
# The error code of a denial, by the rule that denied it.
DENIAL_CODES = MappingProxyType(
    {
        RuleHit.BUDGET_EXCEEDED: ErrorCode.BUDGET_EXCEEDED,
        RuleHit.SCOPE_MISSING: ErrorCode.SCOPE_MISSING,
        RuleHit.KEY_REVOKED: ErrorCode.KEY_REVOKED,
        RuleHit.QUOTA_EXCEEDED: ErrorCode.QUOTA_EXCEEDED,
    }
)
# Dry runs set MoatStatus too, under this patch: histories recorded without it replay.
DRY_RUN_STATUS_PATCH = "dry-run-status"
# Runs that wait for a person's approval (only runs a strict policy holds take that path).
APPROVAL_PATCH = "approval-wait"
# A run whose execution failed ends failed (after its receipt and manifest), under this patch:
# histories recorded when every run completed replay.
FAILED_RUN_PATCH = "failed-run"
# A run that succeeds with no MoatStatus set before (no wait for approval) sets none: its
# ExecutionStatus "Completed" says it, and the upsert is a billed Temporal action. Histories
# recorded when every run set MoatStatus replay.
QUIET_SUCCESS_PATCH = "quiet-success"
# The receipt, the manifest and a successful adapter attempt's completion recorded in one
# transaction (``RECORD_RUN``); histories recorded with a step for each replay.
RECORD_RUN_PATCH = "record-run"
# Every patch above at once, behind one marker in the run's first workflow task: a run that
# has it takes each patched path without a marker of its own (each costs a history event
# and a search-attribute upsert, about 2 ms of a workflow task). Histories recorded before
# it take each patch's own marker, where it was recorded. A patch added after it calls
# ``workflow.patched`` itself (``_patched`` stands only for the ones above).
PATCHES_PATCH = "patches-2026-11"
# A successful adapter attempt records the receipt, the manifest and its completion itself,
# before it reports (``AdapterInput.record``): the run takes no record step after it (one
# local activity, and its workflow task's round of it, fewer). Recorded in the run's first
# workflow task in place of PATCHES_PATCH, and standing for it too: a run still has one
# patch marker. A later patch of this kind replaces this one the same way.
RECORD_IN_CALL_PATCH = "record-in-call"
# The paths a run takes, recorded in its policy check's outcome instead of a patch marker
# (``PolicyInput.paths_version``, echoed in ``PolicyOutcome.paths_version``): 1 is every
# patch above. A patch marker costs two history events (the SDK adds a
# ``TemporalChangeVersion`` upsert to it), and the server's write of that upsert stands
# between the first workflow task and the adapter's attempt (about 1 ms). The outcome is
# recorded in any case, and a run replayed reads it from there. The check runs before any
# patched path, and a check of code from before echoes nothing (0), so the run then takes
# the paths its markers say, as before. A change after this one raises PATHS_VERSION and
# branches on ``self._paths_version``; its histories from before replay with the lower one.
PATHS_VERSION = 1

# Bookkeeping steps talk to our own Postgres: retry quickly and for a while.
BOOKKEEPING_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=5),
)
BOOKKEEPING_TIMEOUT = timedelta(seconds=15)


@workflow.defn(name=EXECUTE_WORKFLOW)
class ExecuteCapability:
    def __init__(self) -> None:
        self._req: ExecuteWorkflowInput | None = None
        self._approval = ApprovalGate()
        self._status_set = False  # MoatStatus set by this run (awaiting approval)
        # A successful attempt whose completion the record step writes (``RECORD_RUN``).
        self._completed: AdapterOutput | None = None
        # What the successful attempt recorded itself (``RECORD_IN_CALL_PATCH``).
        self._recorded: RecordedRun | None = None
        self._patches = False  # PATCHES_PATCH: the run has every patch before it
        self._in_call = False  # RECORD_IN_CALL_PATCH (and so PATCHES_PATCH)
        self._paths_version = 0  # PATHS_VERSION, as the run's policy check recorded it

    @workflow.run
    async def run(self, req: ExecuteWorkflowInput) -> ExecuteResult:
        self._req = req
        if workflow.unsafe.is_replaying():
            # A run recorded before PATHS_VERSION takes the paths its first task's patch
            # markers say. Asked only in a replay: ``patched`` records a marker in a run not
            # replaying, and finds none in a run of PATHS_VERSION (false, recording nothing).
            self._in_call = workflow.patched(RECORD_IN_CALL_PATCH)
            self._patches = self._in_call or workflow.patched(PATCHES_PATCH)
        self._show(req, "checking policy")
        policy: PolicyOutcome = await self._bookkeeping(
            CHECK_POLICY, _policy_input(req), PolicyOutcome, req.local_activities
        )
        self._paths_version = policy.paths_version
        if self._paths_version >= 1:
            self._in_call = self._patches = True
        if req.dry_run:
            return self._planned(policy)
        if policy.existing_receipt is not None:
            return await self._replay(req, policy, policy.existing_receipt)
        approval: Approval | None = None
        if policy.approval_ttl_seconds is not None and policy.decision != Decision.DENY:
            approval = await self._await_approval(req, policy)
        record, tool = await self._act(req, policy, approval)
        return await self._finish(req, policy, record, tool, approval)

    async def _replay(
        self, req: ExecuteWorkflowInput, policy: PolicyOutcome, existing: Receipt
    ) -> ExecuteResult:
        """The answer of a run whose execution already has its receipt."""
        # Our own receipt: this run was reset; another's: a new run answering a stored one.
        reason = "workflow_reset" if existing.id == req.ref.receipt_id else "idempotent_hit"
        await self._manifest(req, existing, policy, replay_reason=reason)
        self._set_status(existing)
        replayed = ExecuteResult(receipt=existing, replayed=True, request_id=req.request_id)
        return self._ended(replayed)

    async def _act(
        self, req: ExecuteWorkflowInput, policy: PolicyOutcome, approval: Approval | None
    ) -> tuple[RecordInput, ToolCall | None]:
        """The outcome to record: a denial, a decision other than approval, or the call."""
        record = _outcome_record(req, policy)
        if policy.decision == Decision.DENY:
            code = DENIAL_CODES.get(policy.rule_hit, ErrorCode.POLICY_DENIED)
            denied = {
                "error_code": code,
                "taxonomy": ErrorTaxonomy.POLICY_DENIED,
                "error_details": policy.denial_details,
            }
            return record.model_copy(update=denied), None
        if approval is not None and approval.status != ApprovalStatus.APPROVED:
            # Rejected or expired: no provider call, no budget used.
            refused = {
                "error_code": f"approval_{approval.status.value}",
                "taxonomy": ErrorTaxonomy.POLICY_DENIED,
            }
            return record.model_copy(update=refused), None
        self._show(req, "calling the provider")
        return await self._call_adapter(req, record, policy, approval)

    async def _finish(
        self,
        req: ExecuteWorkflowInput,
        policy: PolicyOutcome,
        record: RecordInput,
        tool: ToolCall | None,
        approval: Approval | None,
    ) -> ExecuteResult:
        """Record the outcome, leave the manifest, and answer with the receipt."""
        run_id = workflow.info().run_id
        parts = ManifestParts(
            tool=tool,
            policy_mode=policy.mode,
            submitted_at=req.submitted_at,
            dead_lettered=record.retry_exhausted,
            approval=approval,
        )
        recorded = self._recorded  # by the successful attempt itself
        if recorded is None and self._patched(RECORD_RUN_PATCH):
            recorded = await self._bookkeeping(
                RECORD_RUN,
                RecordRunInput(
                    record=record,
                    run_id=run_id,
                    recorded_at=workflow.now(),
                    manifest=parts,
                    completed=self._completed,
                ),
                RecordedRun,
                req.local_activities,
            )
        if recorded is not None:
            receipt = recorded.receipt
            if not recorded.manifest_written:
                await self._manifest(req, receipt, policy, parts=parts)
        else:
            receipt = await self._bookkeeping(RECORD_OUTCOME, record, Receipt, req.local_activities)
            await self._manifest(req, receipt, policy, parts=parts)
        if receipt.run_id != run_id:
            # Reset past the record step: the effect and its manifest belong to the original
            # run; this run leaves a replayed manifest of its own beside it.
            await self._manifest(req, receipt, policy, replay_reason="workflow_reset")
        self._set_status(receipt)
        # The answer this run kept with its receipt goes back with it, so the gateway needs
        # no read of Postgres; a receipt another run recorded keeps that run's answer.
        kept = record.kept() if receipt.run_id == run_id else None
        return self._ended(ExecuteResult(receipt=receipt, request_id=req.request_id, kept=kept))

    async def _await_approval(self, req: ExecuteWorkflowInput, policy: PolicyOutcome) -> Approval:
        """Ask for a person's approval and wait for it, durably, until it expires. A run
        reset after the decision finds it recorded and does not ask again."""
        self._patched(APPROVAL_PATCH)
        requested: Approval = await self._bookkeeping(
            REQUEST_APPROVAL,
            ApprovalRequestInput(
                ref=_run_ref(req),
                capability_id=req.capability.id,
                capability_version=req.capability.version,
                policy_version=policy.policy_version,
                # The policy step has checked it against the start's signature (v3 claims).
                requested_by=key_actor(req.api_key_id),
                ttl_seconds=policy.approval_ttl_seconds or 0,
                allow_self_approval=policy.allow_self_approval,
                input=redact(req.input),
            ),
            Approval,
            req.local_activities,
        )
        if requested.status != ApprovalStatus.PENDING:
            return requested
        workflow.upsert_search_attributes([STATUS_ATTR.value_set(AWAITING_APPROVAL)])
        self._status_set = True
        self._show(req, f"awaiting approval {requested.id} until {requested.expires_at}")
        decided = await self._approval.wait(requested, self._expire)
        self._show(req, f"approval {decided.id} {decided.status.value}")
        return decided

    async def _expire(self, verdict: ApprovalVerdict) -> ApprovalRecorded:
        assert self._req is not None
        recorded: ApprovalRecorded = await self._bookkeeping(
            RECORD_APPROVAL,
            self._record_input(verdict),
            ApprovalRecorded,
            self._req.local_activities,
        )
        return recorded

    def _record_input(self, verdict: ApprovalVerdict) -> ApprovalRecordInput:
        assert self._req is not None
        return ApprovalRecordInput(
            tenant_id=self._req.ref.tenant_id,
            receipt_id=self._req.ref.receipt_id,
            run_id=workflow.info().run_id,
            verdict=verdict,
        )

    @workflow.update(name=DECIDE_APPROVAL_UPDATE)
    async def decide_approval(self, verdict: ApprovalVerdict) -> Approval:
        """A person's decision on the approval this run waits for; the approval as
        recorded. Fails (changing nothing) when the decision is no longer possible."""
        assert self._req is not None
        recorded: ApprovalRecorded = await self._bookkeeping(
            RECORD_APPROVAL,
            self._record_input(verdict),
            ApprovalRecorded,
            self._req.local_activities,
        )
        return self._approval.keep(recorded)

    @decide_approval.validator
    def _check_decision(self, verdict: ApprovalVerdict) -> None:
        """Refused before anything is recorded (``ApprovalGate.check``)."""
        self._approval.check(verdict)

    def _show(self, req: ExecuteWorkflowInput, doing: str) -> None:
        """The run's one line in the Web UI: what it executes and where it is. Metadata
        only (no command), so runs recorded before it replay unchanged."""
        workflow.set_current_details(
            f"{req.capability.id}@{req.capability.version} · receipt {req.ref.receipt_id} · {doing}"
        )

    async def _manifest(
        self,
        req: ExecuteWorkflowInput,
        receipt: Receipt,
        policy: PolicyOutcome,
        *,
        parts: ManifestParts | None = None,
        replay_reason: str | None = None,
    ) -> None:
        """Sign and store the run manifest (``parts``: what it says beside the receipt; a
        replayed run's says only that). Its failure leaves the receipt standing."""
        run_id = workflow.info().run_id
        if parts is not None:
            manifest_input = parts.input_for(receipt, run_id)
        else:
            manifest_input = ManifestInput(
                receipt=receipt,
                run_id=run_id,
                replayed=replay_reason is not None,
                replay_reason=replay_reason,
                policy_mode=policy.mode,
                submitted_at=req.submitted_at,
            )
        try:
            await self._bookkeeping(
                WRITE_MANIFEST, manifest_input, ManifestRef, req.local_activities
            )
        except ActivityError:
            workflow.logger.exception("manifest of receipt %s not written", receipt.id)

    async def _call_adapter(
        self,
        req: ExecuteWorkflowInput,
        record: RecordInput,
        policy: PolicyOutcome,
        approval: Approval | None,
    ) -> tuple[RecordInput, ToolCall]:
        cap = req.capability
        key = downstream_idempotency_key(workflow.info().workflow_id, req.ref.receipt_id, "adapter")
        tool = ToolCall(
            tool_name=cap.id,
            invoked_at=workflow.now(),
            parameters=redact(req.input),
            status="failure",
            idempotency_token=key,
        )
        defer = self._patched(RECORD_RUN_PATCH)
        success = None
        if self._in_call:  # what the attempt records when it succeeds, as _finish would
            parts = ManifestParts(
                tool=tool, policy_mode=policy.mode, submitted_at=req.submitted_at, approval=approval
            )
            success = SuccessRecord(**dict(_record_basis(req, policy)), manifest=parts)
        try:
            out: AdapterOutput = await workflow.execute_activity(
                CALL_ADAPTER,
                _adapter_input(req, policy, key, defer, success),
                result_type=AdapterOutput,
                # The adapter's own HTTP timeout is the capability's; leave it room to report.
                # No heartbeat timeout (the activity would beat): a worker starved of CPU past
                # it loses live attempts, and losing the last one leaves a failure receipt
                # over an effect the provider made (the chaos campaign found 4 in 2,000).
                start_to_close_timeout=timedelta(seconds=cap.timeout_seconds)
                + ADAPTER_TIMEOUT_SLACK,
                retry_policy=_adapter_retry(req),
                priority=tenant_priority(req.ref.tenant_id),
            )
        except ActivityError as err:
            return _failed(req, record, tool, err)
        if out.recorded is not None:
            self._recorded = out.recorded
        elif defer:
            self._completed = out
        return succeeded(record, tool, out)

    def _patched(self, patch_id: str) -> bool:
        """``workflow.patched(patch_id)`` for a patch older than ``PATCHES_PATCH``: true with
        no marker of its own in a run that has that one."""
        return self._patches or workflow.patched(patch_id)

    async def _bookkeeping(self, name: str, arg: Any, result_type: type[Any], local: bool) -> Any:
        options: dict[str, Any] = {
            "result_type": result_type,
            "start_to_close_timeout": BOOKKEEPING_TIMEOUT,
            "schedule_to_close_timeout": BOOKKEEPING_DEADLINE,
            "retry_policy": BOOKKEEPING_RETRY,
        }
        if local:  # runs inside the workflow task: no task queue to be fair on
            return await workflow.execute_local_activity(name, arg, **options)
        assert self._req is not None
        return await workflow.execute_activity(
            name, arg, priority=tenant_priority(self._req.ref.tenant_id), **options
        )

    def _set_status(self, receipt: Receipt) -> None:
        """``MoatStatus``: the receipt's status, for a run that did not succeed or that
        showed another status before; a success alone is its ``Completed`` close."""
        quiet = receipt.status == ExecutionStatus.SUCCESS and not self._status_set
        if not (quiet and self._patched(QUIET_SUCCESS_PATCH)):
            workflow.upsert_search_attributes([STATUS_ATTR.value_set(receipt.status.value)])
        if self._req is not None:
            code = f" · {receipt.error_code}" if receipt.error_code else ""
            self._show(self._req, f"{receipt.status.value}{code}")

    def _ended(self, result: ExecuteResult) -> ExecuteResult:
        """The run's answer: returned when its execution succeeded; when it failed (refused
        by the provider or by policy, timed out, dead-lettered), raised as a non-retryable
        ``ApplicationError`` of the receipt's error code carrying the same ``ExecuteResult``
        in its details: the run ends failed in the Web UI, the gateway answers the same."""
        code = result.failed_code()
        if code is None or not self._patched(FAILED_RUN_PATCH):
            return result
        receipt = result.receipt
        assert receipt is not None
        raise ApplicationError(
            f"execution failed: {code} ({receipt.status.value}); receipt {receipt.id}",
            result,
            type=code,
            non_retryable=True,
        )

    def _planned(self, policy: PolicyOutcome) -> ExecuteResult:
        """A dry run's answer. Its ``MoatStatus = "planned"`` tells a finished dry run apart
        from a run still going, in the Web UI and in visibility queries."""
        if self._patched(DRY_RUN_STATUS_PATCH):
            planned = STATUS_ATTR.value_set(EnvelopeStatus.PLANNED.value)
            workflow.upsert_search_attributes([planned])
        return ExecuteResult(plan=policy)


def _run_ref(req: ExecuteWorkflowInput) -> ExecutionRef:
    """The execution as this run's steps name it: the start's ref, with the run's ids."""
    info = workflow.info()
    return req.ref.model_copy(update={"workflow_id": info.workflow_id, "run_id": info.run_id})


def _policy_input(req: ExecuteWorkflowInput) -> PolicyInput:
    """The check's input. It writes the adapter's first attempt's start when the run calls
    at once (``PolicyOutcome.first_attempt_logged``), which needs no patch: the adapter's
    input says so only when the check's outcome does (a run replayed from before has its
    outcome, saying not), and the step's events have fixed ids (a worker of code from before
    that writes them again writes nothing)."""
    return PolicyInput(
        paths_version=PATHS_VERSION,
        log_first_attempt=True,
        ref=_run_ref(req),
        capability=req.capability,
        idempotency_ttl_seconds=req.idempotency_ttl_seconds,
        dry_run=req.dry_run,
        input_digest=input_digest(req.input),
        start_signature=req.start_signature,
        scopes=req.scopes,
        api_key_id=req.api_key_id,
        plan_approval_id=req.plan_approval_id,
    )


def _outcome_record(req: ExecuteWorkflowInput, policy: PolicyOutcome) -> RecordInput:
    """The record of a run that called nothing (yet): a policy denial until told otherwise."""
    return _record_basis(req, policy).before_call(_run_ref(req), req.capability, req.trace_id)


def _record_basis(req: ExecuteWorkflowInput, policy: PolicyOutcome) -> RecordBasis:
    return RecordBasis(
        request_id=req.request_id,
        submitted_at=req.submitted_at,
        policy_decision_id=policy.policy_decision_id,
        budget_held=policy.budget_held,
    )


def _adapter_input(
    req: ExecuteWorkflowInput,
    policy: PolicyOutcome,
    key: str,
    defer_completion: bool,
    record: SuccessRecord | None,
) -> AdapterInput:
    # A check writes the first attempt's start only for a run that calls at once: never for
    # one that waits for an approval first (``PolicyOutcome.calls_at_once``).
    return AdapterInput(
        defer_completion=defer_completion,
        record=record,
        first_attempt_logged=policy.first_attempt_logged,
        ref=_run_ref(req),
        capability=req.capability,
        input=req.input,
        idempotency_key=key,
        trace_id=req.trace_id,
        resumed=policy.resumed,
        http_allow_hosts=policy.http_allow_hosts,
    )


def _adapter_retry(req: ExecuteWorkflowInput) -> RetryPolicy:
    """The capability's own retries: its backoff, doubling up to its longest wait."""
    retry = req.capability.retry_settings
    return RetryPolicy(
        initial_interval=timedelta(seconds=retry.base_delay_seconds),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=retry.max_delay_seconds),
        maximum_attempts=retry.max_retries + 1,
    )


def _failed(
    req: ExecuteWorkflowInput, record: RecordInput, tool: ToolCall, err: ActivityError
) -> tuple[RecordInput, ToolCall]:
    """The record and manifest entry of an adapter call that failed for good."""
    taxonomy, error_code, http_status = _classify(err.cause)
    unsettled = _unsettled(req, err.cause)
    if unsettled:
        taxonomy, error_code = ErrorTaxonomy.TIMEOUT, OUTCOME_UNKNOWN
    status = (
        ExecutionStatus.TIMEOUT if taxonomy == ErrorTaxonomy.TIMEOUT else ExecutionStatus.FAILURE
    )
    exhausted = err.retry_state == RetryState.MAXIMUM_ATTEMPTS_REACHED
    failed = record.model_copy(
        update={
            "status": status,
            "taxonomy": taxonomy,
            "http_status": http_status,
            "error_code": error_code,
            "adapter_called": True,
            "retry_exhausted": exhausted,
            "error_details": _provider_details(err.cause),
        }
    )
    max_attempts = req.capability.retry_settings.max_retries + 1
    attempts = _attempt_of(err.cause) or (max_attempts if exhausted else 1)
    message = _UNSETTLED if unsettled else _tool_error(err.cause, error_code)
    return failed, tool.model_copy(update={"error": message, "attempts": attempts})


_UNSETTLED = (
    f"{OUTCOME_UNKNOWN}: the last attempt failed in Moat's own steps or timed out without a "
    "word, not at the provider, so nothing settled whether an attempt took effect; it was "
    "not retried so as not to do it twice. Check the provider; if nothing was done, execute "
    "again with a new key"
)


def _unsettled(req: ExecuteWorkflowInput, cause: BaseException | None) -> bool:
    """Whether the final failure leaves the effect unknown: the attempt timed out without a
    word (its worker died or stalled, after the provider may have acted), or failed in
    Moat's own steps (its event writes, the connection's look-up: a fault its adapter did
    not word) and retryably, so an attempt before it, or this one, may have reached the
    provider, and none looked. A capability with no effect has nothing to leave unknown."""
    if req.capability.effect_type == EffectType.NONE:
        return False
    if isinstance(cause, TimeoutError):
        return True  # the attempt never reported: its worker died or stalled mid-call
    if not isinstance(cause, ApplicationError):
        return False
    return not cause.non_retryable and "error_code" not in _details(cause)


def _details(cause: BaseException | None) -> dict[str, Any]:
    if isinstance(cause, ApplicationError) and cause.details:
        details = cause.details[0]
        if isinstance(details, dict):
            return details
    return {}


def _provider_details(cause: BaseException | None) -> dict[str, Any] | None:
    """What the provider said when it refused (already redacted and bounded by the adapter),
    or which host and port the host guard refused."""
    details = _details(cause)
    kept = {
        k: details[k] for k in (PROVIDER_RESPONSE, REFUSED_TARGET) if details.get(k) is not None
    }
    return kept or None


def _attempt_of(cause: BaseException | None) -> int | None:
    attempt = _details(cause).get("attempt")
    return attempt if isinstance(attempt, int) else None


def _tool_error(cause: BaseException | None, error_code: str) -> str:
    """The manifest's account of a failure: Moat's own message for a failure an adapter
    classified, only the type for anything else (its text may hold what the call carried)."""
    if isinstance(cause, ApplicationError) and "error_code" in _details(cause):
        return f"{error_code}: {cause.message}"
    if isinstance(cause, TimeoutError):
        return f"{error_code}: {cause}"
    kind = cause.type if isinstance(cause, ApplicationError) else type(cause).__name__
    return f"{error_code}: {kind}"


def _classify(cause: BaseException | None) -> tuple[ErrorTaxonomy, str, int | None]:
    """Taxonomy, error code and provider status of the adapter's final failure."""
    if isinstance(cause, TimeoutError):
        return ErrorTaxonomy.TIMEOUT, ErrorTaxonomy.TIMEOUT.value, None
    if isinstance(cause, ApplicationError):
        details = _details(cause)
        try:
            taxonomy = ErrorTaxonomy(details.get("taxonomy") or cause.type or "unknown")
        except ValueError:
            taxonomy = ErrorTaxonomy.UNKNOWN
        return taxonomy, details.get("error_code") or taxonomy.value, details.get("http_status")
    return ErrorTaxonomy.GATEWAY_ERROR, ErrorTaxonomy.GATEWAY_ERROR.value, None
