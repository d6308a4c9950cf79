"""Inputs and outputs of the ``ExecuteCapability`` workflow and its activities.

One pydantic model per workflow and activity, so fields can be added compatibly.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, Field, model_validator

from schemas.approvals import Approval
from schemas.capabilities import CapabilitySpec
from schemas.execute import KeptOutput
from schemas.identity import ExecutionRef, Submission, nest_ref
from schemas.provider_evidence import ProviderEvidence
from schemas.records import (
    RESPONSE_TRUNCATED,
    Decision,
    ErrorTaxonomy,
    ExecutionStatus,
    PolicyMode,
    Receipt,
    RuleHit,
)


class ExecuteWorkflowInput(BaseModel):
    """Everything a run needs; resolved at ingest so the run is deterministic. Its ``ref``
    names no workflow or run yet: the run adds its own."""

    ref: ExecutionRef
    capability: CapabilitySpec
    input: dict[str, Any]
    request_id: str
    trace_id: str
    submitted_at: datetime
    idempotency_ttl_seconds: int = 24 * 3600
    local_activities: bool = True
    dry_run: bool = False
    start_signature: str = Field(
        default="",
        description="The gateway's signature of what it vouches for (schemas.start); the "
        "policy step refuses a run without a valid one.",
    )
    api_key_id: str = Field(
        default="",
        description="The key that made the call (separation of duties): signed with the "
        "start (``v3`` claims), so an approval can trust it.",
    )
    scopes: list[str] | None = Field(
        default=None,
        description="The scopes of the API key that asked for the run, checked by the "
        "policy step against the capability's. None: a run started before keys had scopes, "
        "or by Moat itself (synthetic probes).",
    )
    plan_approval_id: str | None = Field(
        default=None,
        description="The approval of the whole plan this run is a step of (``v4`` claims): "
        "granted, so the step asks no one again.",
    )

    @model_validator(mode="before")
    @classmethod
    def _flat_shape(cls, data: Any) -> Any:
        """The flat shape (the ref's fields among the input's own), which histories
        of open runs hold, reads into the ref."""
        return nest_ref(data)

    @model_validator(mode="after")
    def _submission(self) -> ExecuteWorkflowInput:
        """The ref carries the start's labels to the steps (the policy step's intake event),
        always the input's own: a copy for another request (a requeue) names that one."""
        own = Submission(
            submitted_at=self.submitted_at, request_id=self.request_id, trace_id=self.trace_id
        )
        if self.ref.submission != own:
            self.ref = self.ref.model_copy(update={"submission": own})
        return self


class PolicyInput(BaseModel):
    ref: ExecutionRef
    capability: CapabilitySpec
    idempotency_ttl_seconds: int
    dry_run: bool = False
    input_digest: str = Field(default="", description="schemas.start.input_digest of the input.")
    start_signature: str = ""
    scopes: list[str] | None = Field(
        default=None, description="See ``ExecuteWorkflowInput.scopes``."
    )
    api_key_id: str = Field(
        default="",
        description="See ``ExecuteWorkflowInput.api_key_id``; checked against the start's "
        "signature (``v3`` claims) before the run may ask for an approval in its name.",
    )
    plan_approval_id: str | None = Field(
        default=None, description="See ``ExecuteWorkflowInput.plan_approval_id``."
    )
    paths_version: int = Field(
        default=0,
        description="Which of ``ExecuteCapability``'s patched paths the run takes "
        "(``workflows.execute.PATHS_VERSION``), echoed in the outcome "
        "(``PolicyOutcome.paths_version``), whose record in the run's history says it on "
        "every replay.",
    )
    log_first_attempt: bool = Field(
        default=False,
        description="When the decision lets the run call its adapter at once, the check "
        "writes the first attempt's start events (``STEP_STARTED``, ``TOOL_CALLED``) with "
        "its own, in its transaction, and says so (``PolicyOutcome.first_attempt_logged``).",
    )

    @model_validator(mode="before")
    @classmethod
    def _flat_shape(cls, data: Any) -> Any:
        """The flat shape (the ref's fields among the input's own), which histories
        of open runs hold, reads into the ref."""
        return nest_ref(data)


class PolicyOutcome(BaseModel):
    """The decision, plus the receipt already stored for the key when there is one."""

    policy_decision_id: str
    decision: Decision
    rule_hit: RuleHit
    mode: PolicyMode
    existing_receipt: Receipt | None = None
    reason: str = ""
    resumed: bool = Field(
        default=False,
        description="The execution held its key before this check: a retried check, a reset "
        "run, or a new run resuming an execution whose run ended before recording. An "
        "earlier request with its downstream Idempotency-Key may still be in flight.",
    )
    budget_held: bool = Field(
        default=False, description="The execution holds a unit of its budget until it records."
    )
    http_allow_hosts: list[str] = Field(
        default_factory=list,
        description="The tenant's own allow-list entries (host[:port]), read with its policy.",
    )
    policy_version: int = Field(default=0, description="The policy document evaluated.")
    approval_ttl_seconds: int | None = Field(
        default=None,
        description="Set when the run must wait for a person's approval: how long it waits.",
    )
    allow_self_approval: bool = False
    denial_details: dict[str, Any] | None = Field(
        default=None,
        description="What a denial's envelope says beside its code (a quota's limit and "
        "usage); None when there is nothing to add.",
    )
    paths_version: int = Field(
        default=0,
        description="``PolicyInput.paths_version`` as the check was asked (0: not asked).",
    )
    first_attempt_logged: bool = Field(
        default=False,
        description="The check wrote the adapter's first attempt's start events "
        "(``PolicyInput.log_first_attempt``): that attempt writes none of its own.",
    )

    @property
    def calls_at_once(self) -> bool:
        """Whether the run calls its adapter straight after this decision: neither denied
        nor waiting for a person's approval (a dry run or a stored receipt calls nothing,
        whatever it says)."""
        return self.decision != Decision.DENY and self.approval_ttl_seconds is None


class AdapterInput(BaseModel):
    ref: ExecutionRef
    capability: CapabilitySpec
    input: dict[str, Any]
    idempotency_key: str = Field(
        description="Sent downstream as Idempotency-Key (``downstream_idempotency_key``), "
        "not the caller's key (``ref.idempotency_key``)."
    )
    trace_id: str
    attempt: int = Field(default=1, ge=1, description="Set by the activity: 1 on the first try.")
    resumed: bool = Field(default=False, description="See ``PolicyOutcome.resumed``.")
    http_allow_hosts: list[str] = Field(
        default_factory=list,
        description="The tenant's allow-list entries, added to the worker's own.",
    )
    defer_completion: bool = Field(
        default=False,
        description="A successful attempt's completion events are written by the record "
        "step, in the transaction of the receipt (``RecordRunInput.completed``).",
    )
    record: SuccessRecord | None = Field(
        default=None,
        description="A successful attempt records its receipt, its manifest and its "
        "completion itself, in one transaction, before it reports (None: the run's record "
        "step does). When it cannot, the run's record step does it all the same.",
    )
    first_attempt_logged: bool = Field(
        default=False,
        description="The policy check wrote the first attempt's start events "
        "(``PolicyOutcome.first_attempt_logged``): attempt 1 writes none before its call.",
    )

    @model_validator(mode="before")
    @classmethod
    def _flat_shape(cls, data: Any) -> Any:
        """The flat shape, which histories of open runs hold, reads into the ref; its
        ``idempotency_key`` is the downstream one, which stays where it is."""
        return nest_ref(data, ("tenant_id", "receipt_id", "connection_id"))

    @property
    def repeat(self) -> bool:
        """Whether a request with this Idempotency-Key may have been sent before."""
        return self.attempt > 1 or self.resumed


class AdapterOutput(BaseModel):
    http_status: int | None = None
    invoked_at: datetime | None = None
    attempt: int = 1
    duration_ms: int | None = Field(default=None, description="The attempt's, set by the step.")
    output_hash: str
    output: Any = Field(default=None, description="The redacted output.")
    truncated: bool = Field(
        default=False,
        description="The provider's answer was larger than the adapter reads: ``output`` "
        "holds its first bytes as text (``truncated: true``).",
    )
    reconciled: bool | None = Field(
        default=None,
        description="A ``reconcile`` adapter's look-up before a repeated attempt: True, the "
        "effect of an earlier attempt was found and returned; False, none was found and the "
        "effect was performed now; None, no look-up was needed.",
    )
    evidence: ProviderEvidence | None = Field(
        default=None, description="What the effect left at the provider, for the receipt."
    )
    recorded: RecordedRun | None = Field(
        default=None,
        description="What the attempt recorded with its success (``AdapterInput.record``); "
        "None: the run's record step records it.",
    )


class RecordInput(BaseModel):
    """One attempt's outcome, to be written as receipt + outcome event (+ budget)."""

    ref: ExecutionRef
    capability: CapabilitySpec
    request_id: str
    trace_id: str
    submitted_at: datetime
    policy_decision_id: str
    success: bool
    status: str
    error_code: str | None = None
    taxonomy: ErrorTaxonomy = ErrorTaxonomy.NONE
    http_status: int | None = None
    output_hash: str | None = None
    output: Any = Field(default=None, description="A success's redacted output, to be kept.")
    error_details: dict[str, Any] | None = Field(
        default=None, description="A failure's redacted provider details, to be kept."
    )
    adapter_called: bool = False
    retry_exhausted: bool = False
    provider_evidence: ProviderEvidence | None = Field(
        default=None, description="The adapter's ``AdapterOutput.evidence``, for the receipt."
    )
    # False when the policy step took no budget hold, so there is none to give back; an
    # input from before this field looks for one.
    budget_held: bool = True

    @model_validator(mode="before")
    @classmethod
    def _flat_shape(cls, data: Any) -> Any:
        """The flat shape (the ref's fields among the input's own), which histories
        of open runs hold, reads into the ref."""
        return nest_ref(data)

    def kept(self) -> KeptOutput | None:
        """What of the answer is kept with the receipt (sealed, in ``execution_outputs``): a
        called adapter's output, or what the provider said when it refused, or what a
        denial's envelope says beside its code (a quota's figures). None: nothing."""
        if self.output is None and not self.error_details:
            return None
        if not self.adapter_called and not self.error_details:
            return None
        return KeptOutput(output=self.output, error_details=self.error_details)


class ExecuteResult(BaseModel):
    """What a run returns: its receipt (whether it already existed), or for a dry run the
    policy decision it would have been executed under."""

    receipt: Receipt | None = None
    replayed: bool = False
    plan: PolicyOutcome | None = None
    request_id: str | None = Field(
        default=None, description="The request that started this run (attached ones differ)."
    )
    kept: KeptOutput | None = Field(
        default=None,
        description="What the run kept of the answer with the receipt it recorded itself, so "
        "the gateway answers without reading it back (None: read it from Postgres).",
    )

    @classmethod
    def of_failure(cls, error_type: str | None, details: Sequence[Any]) -> ExecuteResult | None:
        """The answer a run that ended failed carries (its failure's type is the receipt's
        error code, its first detail this ``ExecuteResult``); None for any other failure."""
        if not details or not isinstance(details[0], dict):
            return None
        try:
            result = cls.model_validate(details[0])
        except ValueError:
            return None
        code = result.failed_code()
        return result if code is not None and code == error_type else None

    def failed_code(self) -> str | None:
        """The error code of a run whose execution failed (its receipt's); None when it
        succeeded, planned, or has no receipt."""
        receipt = self.receipt
        if receipt is None or receipt.status not in FAILED_STATUSES:
            return None
        return receipt.error_code or receipt.status.value


# How long the workflow gives its steps (workflows/execute.py uses these).
ADAPTER_TIMEOUT_SLACK = timedelta(seconds=5)  # beyond the capability's own HTTP timeout
BOOKKEEPING_DEADLINE = timedelta(minutes=10)  # each bookkeeping step, retries included
MAX_RETRY_AFTER = timedelta(minutes=10)  # the longest provider Retry-After honoured
# The receipt statuses of an execution that failed: its run ends failed.
FAILED_STATUSES = frozenset(
    {ExecutionStatus.FAILURE, ExecutionStatus.TIMEOUT, ExecutionStatus.POLICY_DENIED}
)


def longest_run_seconds(capability: CapabilitySpec) -> float:
    """How long an execution of ``capability`` can take at most: every adapter attempt
    running to its timeout, each followed by the longest wait (backoff or ``Retry-After``),
    plus the bookkeeping steps' deadlines. A budget hold lasts that long."""
    retry = capability.retry_settings
    wait = max(retry.max_delay_seconds, MAX_RETRY_AFTER.total_seconds())
    per_attempt = capability.timeout_seconds + ADAPTER_TIMEOUT_SLACK.total_seconds() + wait
    return (retry.max_retries + 1) * per_attempt + 3 * BOOKKEEPING_DEADLINE.total_seconds()


def workflow_id_for(tenant_id: str, idempotency_key: str) -> str:
    """The run's workflow id: one per tenant and idempotency key (hashed, so any key fits)."""
    digest = hashlib.sha256(idempotency_key.encode()).hexdigest()[:32]
    return f"exec/{tenant_id}/{digest}"


def downstream_idempotency_key(workflow_id: str, receipt_id: str, step: str) -> str:
    """The ``Idempotency-Key`` an adapter sends: stable across activity retries and workflow
    resets (never the run id or attempt), new for a new execution after the TTL."""
    digest = hashlib.sha256(f"{workflow_id}|{receipt_id}|{step}".encode()).hexdigest()
    return f"moat-{digest[:48]}"


class ToolCall(BaseModel):
    """The adapter call as the manifest records it (parameters and data already redacted)."""

    tool_name: str
    invoked_at: datetime
    parameters: dict[str, Any]
    status: str
    data: Any = None
    error: str | None = None
    idempotency_token: str | None = None
    attempts: int = 1


class ManifestInput(BaseModel):
    """What the manifest activity signs and stores for one run."""

    receipt: Receipt
    run_id: str = Field(description="The Temporal run writing this manifest.")
    replayed: bool = False
    replay_reason: str | None = None
    tool: ToolCall | None = None
    policy_mode: PolicyMode = PolicyMode.STANDARD
    submitted_at: datetime
    dead_lettered: bool = False
    approval: Approval | None = Field(
        default=None, description="The person's decision the run waited for, if any."
    )


class ManifestParts(BaseModel):
    """What a run's manifest says beside its receipt (``ManifestInput`` without it)."""

    tool: ToolCall | None = None
    policy_mode: PolicyMode = PolicyMode.STANDARD
    submitted_at: datetime
    dead_lettered: bool = False
    approval: Approval | None = None

    def input_for(self, receipt: Receipt, run_id: str) -> ManifestInput:
        return ManifestInput(
            receipt=receipt,
            run_id=run_id,
            tool=self.tool,
            policy_mode=self.policy_mode,
            submitted_at=self.submitted_at,
            dead_lettered=self.dead_lettered,
            approval=self.approval,
        )


class RecordRunInput(BaseModel):
    """The record step of a run that records its receipt, its manifest and its adapter's
    completion in one transaction (``RECORD_RUN``)."""

    record: RecordInput
    run_id: str
    recorded_at: datetime = Field(
        description="The workflow's time of the record step: every attempt builds the same "
        "receipt, so a manifest an earlier attempt stored still matches it."
    )
    manifest: ManifestParts
    completed: AdapterOutput | None = Field(
        default=None, description="The successful attempt whose completion is recorded here."
    )


class RecordedRun(BaseModel):
    receipt: Receipt
    manifest_written: bool = Field(
        description="False: the manifest was not written with the receipt (a retried step "
        "found the receipt recorded, or signing or storing failed); the run writes it next."
    )


class RecordBasis(BaseModel):
    """What a run's record of its outcome holds beside its ref, capability and trace id."""

    request_id: str
    submitted_at: datetime
    policy_decision_id: str
    budget_held: bool = True

    def before_call(
        self, ref: ExecutionRef, capability: CapabilitySpec, trace_id: str
    ) -> RecordInput:
        """The record of a run that called nothing (yet): a policy denial until told
        otherwise (``succeeded``, or the run's failure)."""
        return RecordInput(
            ref=ref,
            capability=capability,
            request_id=self.request_id,
            trace_id=trace_id,
            submitted_at=self.submitted_at,
            policy_decision_id=self.policy_decision_id,
            success=False,
            status=ExecutionStatus.POLICY_DENIED,
            budget_held=self.budget_held,
        )


class SuccessRecord(RecordBasis):
    """What a run records when its adapter call succeeds, beside what the adapter's input
    holds (``AdapterInput.record``): with it the successful attempt records the receipt,
    its manifest and its completion itself, as the run's record step would."""

    manifest: ManifestParts = Field(
        description="The manifest's parts, its tool call as it stands before the call."
    )

    def run_input(
        self, inp: AdapterInput, out: AdapterOutput, recorded_at: datetime
    ) -> RecordRunInput:
        """The record step's input for ``out``, the successful attempt of ``inp``."""
        before = self.before_call(inp.ref, inp.capability, inp.trace_id)
        tool = self.manifest.tool
        assert tool is not None
        record, called = succeeded(before, tool, out)
        return RecordRunInput(
            record=record,
            run_id=inp.ref.run_id,
            recorded_at=recorded_at,
            manifest=self.manifest.model_copy(update={"tool": called}),
            completed=out,
        )


def succeeded(
    record: RecordInput, tool: ToolCall, out: AdapterOutput
) -> tuple[RecordInput, ToolCall]:
    """The record and manifest entry of an adapter call that succeeded."""
    success = record.model_copy(
        update={
            "success": True,
            "status": ExecutionStatus.SUCCESS,
            "taxonomy": ErrorTaxonomy.NONE,
            "http_status": out.http_status,
            "output_hash": out.output_hash,
            "output": out.output,
            "adapter_called": True,
            "provider_evidence": out.evidence,
            # A success's error code is a warning the envelope passes on.
            "error_code": RESPONSE_TRUNCATED if out.truncated else None,
        }
    )
    return success, tool.model_copy(
        update={
            "status": "success",
            "data": out.output,
            "attempts": out.attempt,
            "invoked_at": out.invoked_at or tool.invoked_at,
        }
    )


class ManifestRef(BaseModel):
    path: str
    sha256: str
    kid: str


# Fields naming models defined further down.
AdapterInput.model_rebuild()
AdapterOutput.model_rebuild()
