"""Inputs and outputs of the ``ExecutePlan`` workflow and its activities."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from schemas.approvals import Approval
from schemas.capabilities import CapabilitySpec
from schemas.execute import ErrorBody
from schemas.plans import PlanRequest, PlanStatus, StepState
from schemas.records import Receipt
from schemas.run import ExecuteWorkflowInput

PLAN_CAPABILITY = "moat.plan"


class Resume(BaseModel):
    """An operator's resume of a failed plan: who, and what they stated."""

    by: str
    effect_did_not_happen: bool
    note: str = ""
    at: datetime


class PlanWorkflowInput(BaseModel):
    """Everything a plan's run needs, checked at ingest; signed by the gateway
    (``schemas.start.PlanClaims``). ``plan`` holds the steps as written, raw inputs and
    all (the Temporal payload codec encrypts it)."""

    plan_id: str
    tenant_id: str
    idempotency_key: str | None = Field(description="None for a dry run.")
    plan: dict[str, Any] = Field(description="``PlanRequest.document()``.")
    plan_hash: str
    request_id: str
    trace_id: str
    submitted_at: datetime
    idempotency_ttl_seconds: int = 24 * 3600
    local_activities: bool = True
    dry_run: bool = False
    scopes: list[str] = Field(default_factory=list)
    api_key_id: str = ""
    resume: Resume | None = None
    specs: dict[str, CapabilitySpec] = Field(
        default_factory=dict,
        description="Each call's capability as the gateway resolved it at ingest (by step "
        "id, and ``<step id>/compensate``): the run does not depend on a worker's catalog.",
    )
    start_signature: str = ""

    def spec_of(self, step_id: str, kind: str = "step") -> CapabilitySpec | None:
        return self.specs.get(step_id if kind == "step" else f"{step_id}/compensate")

    def request(self) -> PlanRequest:
        return PlanRequest.model_validate({"schema_version": "1", **self.plan})


def plan_workflow_id(tenant_id: str, idempotency_key: str | None, plan_id: str) -> str:
    """A plan's run: one per tenant and key (hashed, so any key fits); a dry run's own."""
    if idempotency_key is None:
        return f"plan/{tenant_id}/dry/{plan_id}"
    digest = hashlib.sha256(idempotency_key.encode()).hexdigest()[:32]
    return f"plan/{tenant_id}/{digest}"


class PlanBeginInput(BaseModel):
    run: PlanWorkflowInput
    workflow_id: str
    run_id: str


class PlanBegun(BaseModel):
    """What the plan's first step found: the plan as stored (a repeat, a reset or a resume
    continues it), whether it must ask a person first, and a dry run's decisions."""

    plan_id: str
    status: PlanStatus
    steps: list[StepState]
    finished: bool = Field(
        default=False, description="The plan ended before this run: answer it as stored."
    )
    error: ErrorBody | None = None
    needs_approval: bool = False
    policy_version: int = 0
    approval_ttl_seconds: int = 0
    allow_self_approval: bool = False
    approval: Approval | None = Field(
        default=None, description="The plan's approval, when it asked already."
    )
    outputs: dict[str, Any] = Field(
        default_factory=dict, description="What the executed steps answered (redacted)."
    )


CallKind = Literal["step", "compensate"]


class StepPrepareInput(BaseModel):
    run: PlanWorkflowInput
    workflow_id: str
    run_id: str
    step_id: str
    kind: CallKind = "step"
    attempt: int = 0
    outputs: dict[str, Any] = Field(default_factory=dict)
    approval_id: str | None = Field(
        default=None, description="The plan's approval, granted: its steps ask no one again."
    )


class StepLaunch(BaseModel):
    """A step's execution, ready to start as a child run (``start``), or already answered:
    its receipt stored for the key, or the reason it cannot run (``skipped``/``error``)."""

    step_id: str
    kind: CallKind = "step"
    idempotency_key: str
    receipt_id: str | None = None
    workflow_id: str | None = None
    start: ExecuteWorkflowInput | None = None
    receipt: Receipt | None = None
    output: Any = None
    skipped: str | None = Field(default=None, description="Why the step does not run.")
    error: ErrorBody | None = None


class CheckpointInput(BaseModel):
    run: PlanWorkflowInput
    plan_id: str
    workflow_id: str
    run_id: str
    steps: list[StepState]
    step_id: str
    event: Literal["checkpoint", "skipped", "compensated"] = "checkpoint"
    reason: str = ""
    output_of: str | None = Field(
        default=None, description="A receipt whose kept output the plan needs (a replay)."
    )


class CheckpointOutput(BaseModel):
    output: Any = None


class PlanFinishInput(BaseModel):
    run: PlanWorkflowInput
    plan_id: str
    workflow_id: str
    run_id: str
    status: PlanStatus
    steps: list[StepState]
    error: ErrorBody | None = None
    cancelled_by: str | None = None
    approval: Approval | None = None
    outputs: dict[str, Any] = Field(default_factory=dict)
    rolled_back: bool = False


class PlanResult(BaseModel):
    """What a plan's run returns (or, for a failed plan, carries in its failure)."""

    plan_id: str
    status: PlanStatus
    steps: list[StepState]
    outputs: dict[str, Any] = Field(default_factory=dict)
    error: ErrorBody | None = None
    approval: Approval | None = None
    replayed: bool = False
    manifest_path: str | None = None
