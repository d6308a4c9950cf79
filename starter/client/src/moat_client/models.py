"""What the gateway answers, as the client reads it.

The client's own copies of the gateway's published shapes (its ``/openapi.json``): the
client imports nothing of the server. Every model keeps the fields it does not declare
(``extra="allow"``), so a newer gateway that adds fields does not break an older client, and
an envelope dumped again shows everything the gateway sent.

Only the envelope's ``status`` is an enum: the client branches on it, and its four values
are fixed. A receipt's ``status``, an approval's ``status``, a capability's ``effect_type``,
``idempotency`` and ``connection_types`` are plain strings, so a gateway that adds a value
does not break clients that only pass it on.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class EnvelopeStatus(StrEnum):
    """Where an execution stands: ``planned`` answers a dry run, ``accepted`` a run that
    outlasted the wait (poll it), ``executed`` and ``failed`` a finished one."""

    ACCEPTED = "accepted"
    PLANNED = "planned"
    EXECUTED = "executed"
    FAILED = "failed"


class ErrorBody(BaseModel):
    """A stable ``code``, a message for people, and ``details`` that depend on the code."""

    model_config = ConfigDict(extra="allow")

    code: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class Receipt(BaseModel):
    """The immutable record of one execution attempt (hashes only, never raw data)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str
    capability_id: str
    capability_version: str
    adapter_id: str
    tenant_id: str
    connection_id: str
    request_id: str
    timestamp: datetime
    latency_ms: int
    idempotency_key: str
    input_hash: str
    output_hash: str | None = None
    status: str = Field(description="success, failure, timeout, policy_denied or idempotent_hit.")
    error_code: str | None = None
    http_status: int | None = None
    policy_decision_id: str
    is_synthetic: bool = False
    workflow_id: str
    run_id: str
    trace_id: str
    provider_evidence: dict[str, Any] | None = Field(
        default=None,
        description="What the effect left at the provider: object id, permalink, and how a "
        "reconcile look-up found an earlier attempt's effect.",
    )


class Plan(BaseModel):
    """What a dry run found: the policy decision the execution would run under."""

    model_config = ConfigDict(extra="allow")

    policy_decision_id: str
    decision: str
    rule_hit: str
    mode: str
    reason: str = ""


class ApprovalRef(BaseModel):
    """The person's approval an ``accepted`` run waits for (strict policy). Whoever decides
    it (``POST /v1/approvals/{id}/approve`` or ``reject``, with a key holding
    ``approvals:write`` other than the caller's) gives back this ``input_hash`` and
    ``policy_version``: the decision binds to exactly this call."""

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str
    status: str = Field(description="pending, approved, rejected or expired.")
    input_hash: str
    capability_id: str
    capability_version: str
    policy_version: int
    expires_at: datetime


class Envelope(BaseModel):
    """Every answer of the execute API, success or not."""

    model_config = ConfigDict(extra="allow")

    receipt_id: str | None = None
    trace_id: str
    status: EnvelopeStatus
    idempotency_key: str | None = None
    workflow_id: str | None = None
    run_id: str | None = None
    receipt: Receipt | None = None
    output: Any = None
    output_expired: bool = False
    plan: Plan | None = None
    approval: ApprovalRef | None = Field(
        default=None,
        description="accepted only: the approval the run waits for; every request with the "
        "key answers the same one until it is decided.",
    )
    error: ErrorBody | None = None
    warnings: list[ErrorBody] = Field(default_factory=list)
    replayed: bool = Field(
        default=False,
        description="True only when the answer is a stored receipt recorded before this "
        "request (an idempotent hit); a request that attached to a run still going is not "
        "a replay.",
    )


class ErrorEnvelope(BaseModel):
    """A refused request's answer: what ``MoatError`` is made of. Only ``trace_id`` and
    ``error`` are read, the only fields the gateway promises in a refusal."""

    model_config = ConfigDict(extra="allow")

    trace_id: str
    error: ErrorBody


class ReceiptPage(BaseModel):
    """One page of receipts, newest first; pass ``next_cursor`` back as ``cursor``."""

    model_config = ConfigDict(extra="allow")

    items: list[Receipt]
    next_cursor: str | None = None


class RetrySettings(BaseModel):
    """Retries after the first attempt, with exponential backoff from ``base_delay_seconds``."""

    model_config = ConfigDict(extra="allow", frozen=True)

    max_retries: int
    base_delay_seconds: float
    max_delay_seconds: float = 300.0


class ProbeSpec(BaseModel):
    """How the gateway's synthetic prober may call a capability with no side effect."""

    model_config = ConfigDict(extra="allow", frozen=True)

    default_input: dict[str, Any] | None = None
    allowed_values: dict[str, list[str]] = Field(default_factory=dict)


class CapabilityInfo(BaseModel):
    """A capability as ``GET /v1/capabilities`` lists it."""

    model_config = ConfigDict(extra="allow")

    id: str
    version: str
    adapter: str
    adapter_id: str
    description: str
    effect_type: str
    required_scopes: list[str]
    timeout_seconds: float
    requires_approval: bool = Field(
        description="The catalog holds every call for a person's approval (a strict policy's "
        "rules may hold others too: ``ApprovalRequired`` says so per call)."
    )
    retry: RetrySettings
    input_schema: dict[str, Any] = Field(description="JSON Schema of the capability's input.")
    idempotency: str = Field(
        default="none",
        description="provider_key | reconcile | natural | none: how a repeat is kept from a "
        "second effect (natural: repeating the call leaves the same state).",
    )
    connection_types: list[str] = Field(
        default_factory=list,
        description="Connection types a call may name with ``connection_id``; empty: none.",
    )
    probe: ProbeSpec | None = Field(
        default=None, description="How it may be probed with no side effect; None: never."
    )


class PlanStatus(StrEnum):
    """Where a plan stands: ``planned`` answers a dry run, ``accepted`` a plan still running
    or waiting for a person's approval (poll it), ``executed`` and ``failed`` a finished one."""

    ACCEPTED = "accepted"
    PLANNED = "planned"
    EXECUTED = "executed"
    FAILED = "failed"


class PlanStep(BaseModel):
    """One step of a plan as it stands: its execution's ``receipt_id`` and, once it
    executed, its ``output``; a dry run's ``decision`` instead."""

    model_config = ConfigDict(extra="allow")

    id: str
    status: str = Field(description="pending, executed, failed, skipped or compensated.")
    capability_id: str
    receipt_id: str | None = None
    output: Any = None
    error: ErrorBody | None = None
    decision: dict[str, Any] | None = None
    compensation_receipt_id: str | None = None


class PlanEnvelope(BaseModel):
    """Every answer of the plans API that describes a plan, finished or not."""

    model_config = ConfigDict(extra="allow")

    plan_id: str
    status: PlanStatus
    steps: list[PlanStep]
    trace_id: str
    idempotency_key: str | None = None
    workflow_id: str | None = None
    replayed: bool = False
    error: ErrorBody | None = Field(
        default=None, description="failed only: the failing step's error."
    )
    approval: ApprovalRef | None = Field(
        default=None, description="accepted only: the approval of the whole plan it waits for."
    )
    on_failure: str = Field(default="stop", description="stop or compensate.")
