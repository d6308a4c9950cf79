"""What the gateway vouches for when it starts a run.

Anyone able to start a workflow in the namespace could name any tenant in the input; only
the gateway has authenticated the caller. So the gateway signs these claims (HMAC-SHA256,
with a key it shares with the workers) and the run's policy step checks them before
anything else. The claims are everything that decides what a run does and on whose behalf:
who (tenant), which execution (workflow id, receipt id, idempotency key and its window),
what (capability, the raw input and its redacted hash, connection), and how (dry run,
synthetic probe, which skips budgets). Labels (trace and request ids, submission time) are
left out: swapping them changes nothing a run does.

A field added to the claims later must be added under a new version, so that runs started
(and signed) before it can still be reset: ``v2`` added the caller's scopes (claims without
scopes are still checked as ``v1``), and ``v3`` the requesting API key, which the approval
step trusts to keep an approver from approving their own call. The gateway signs ``v3``
only; a worker checks a start against the version its signature names, so ``v1`` and
``v2`` starts (which never vouched for a requester) still verify, and no start can be moved
to an older version without breaking its signature (the version is in the signed bytes).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic_core import to_json

from schemas.approvals import ApprovalVerdict
from schemas.capabilities import CapabilitySpec
from schemas.errors import ErrorCode
from schemas.identity import ExecutionRef, nest_ref
from schemas.planrun import PlanWorkflowInput
from schemas.run import ExecuteWorkflowInput, PolicyInput

CLAIMS_VERSION = "v3"
# Claims of a plan's step whose plan a person approved as a whole: ``v3`` and that approval.
CLAIMS_VERSION_PLAN_APPROVED = "v4"
PLAN_CLAIMS_VERSION = "p1"
# Claims without the requesting key (runs started before approvals were bound to it).
CLAIMS_VERSION_NO_REQUESTER = "v2"
# Claims without scopes either (runs started before keys had them).
CLAIMS_VERSION_NO_SCOPES = "v1"
START_NOT_SIGNED = ErrorCode.START_NOT_SIGNED
DECISION_VERSION = "d1"
DECISION_NOT_SIGNED = ErrorCode.DECISION_NOT_SIGNED
# What of an execution's ref the start claims name (no run: a reset run keeps its start).
SIGNED_REF_FIELDS = (
    "workflow_id",
    "tenant_id",
    "receipt_id",
    "idempotency_key",
    "input_hash",
    "connection_id",
    "is_synthetic",
)


def input_digest(value: Mapping[str, Any]) -> str:
    """SHA-256 of a run's raw input. Unlike ``input_hash`` (over the redacted input) it binds
    secret values too. Computed on the JSON that carries the input through Temporal, so the
    gateway (before) and the worker (after) get the same bytes."""
    return "sha256:" + hashlib.sha256(to_json(value)).hexdigest()


def _capability(spec: CapabilitySpec) -> dict[str, Any]:
    # Without defaults: a field added to the spec later leaves old runs' claims unchanged.
    return spec.model_dump(mode="json", exclude_defaults=True)


class StartClaims(BaseModel):
    """The signed content of a start: which execution (its ``ref``, without a run id: a
    reset run is vouched for by its start) and what decides what the run does."""

    model_config = ConfigDict(frozen=True)

    ref: ExecutionRef
    idempotency_ttl_seconds: int
    input_digest: str
    capability: dict[str, Any]
    dry_run: bool
    scopes: list[str] | None = None
    # The requesting key's id ("" for Moat's own runs); None only in v1/v2 claims.
    api_key_id: str | None = None
    # The approval of the plan the run is a step of (v4 claims only).
    plan_approval_id: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _flat_shape(cls, data: Any) -> Any:
        """Claims named field by field, as they are signed, read into the ref."""
        return nest_ref(data, SIGNED_REF_FIELDS)

    @property
    def version(self) -> str:
        if self.plan_approval_id is not None:
            return CLAIMS_VERSION_PLAN_APPROVED
        if self.api_key_id is not None:
            return CLAIMS_VERSION
        return CLAIMS_VERSION_NO_SCOPES if self.scopes is None else CLAIMS_VERSION_NO_REQUESTER

    @classmethod
    def of_start(cls, req: ExecuteWorkflowInput, workflow_id: str) -> StartClaims:
        """What the gateway signs for the run it starts under ``workflow_id``."""
        return cls(
            ref=_signed_ref(req.ref, workflow_id),
            idempotency_ttl_seconds=req.idempotency_ttl_seconds,
            input_digest=input_digest(req.input),
            capability=_capability(req.capability),
            dry_run=req.dry_run,
            scopes=req.scopes,
            api_key_id=req.api_key_id,
            plan_approval_id=req.plan_approval_id,
        )

    @classmethod
    def of_policy(cls, inp: PolicyInput) -> StartClaims:
        """What the policy step acts on; its workflow id is the running one's. The requesting
        key is among the claims when the signature names ``v3``; an older signature never
        covered it, so the policy step checks that start as it was signed."""
        signed_as = inp.start_signature.partition(".")[0]
        return cls(
            ref=_signed_ref(inp.ref, inp.ref.workflow_id),
            idempotency_ttl_seconds=inp.idempotency_ttl_seconds,
            input_digest=inp.input_digest,
            capability=_capability(inp.capability),
            dry_run=inp.dry_run,
            scopes=inp.scopes,
            api_key_id=inp.api_key_id if signed_as in _WITH_REQUESTER else None,
            plan_approval_id=inp.plan_approval_id,
        )

    def claims(self) -> dict[str, Any]:
        """The claims by name, flat, as every version signs them: ``v2`` claims have no
        ``api_key_id`` key, ``v1`` claims no ``scopes`` key either; ``v3`` claims have both,
        ``scopes`` possibly null."""
        ref = self.ref
        claims: dict[str, Any] = {
            "workflow_id": ref.workflow_id,
            "tenant_id": ref.tenant_id,
            "receipt_id": ref.receipt_id,
            "idempotency_key": ref.idempotency_key,
            "idempotency_ttl_seconds": self.idempotency_ttl_seconds,
            "input_hash": ref.input_hash,
            "input_digest": self.input_digest,
            "capability": self.capability,
            "connection_id": ref.connection_id,
            "is_synthetic": ref.is_synthetic,
            "dry_run": self.dry_run,
        }
        if self.api_key_id is not None or self.scopes is not None:
            claims["scopes"] = self.scopes
        if self.api_key_id is not None:
            claims["api_key_id"] = self.api_key_id
        if self.plan_approval_id is not None:
            claims["plan_approval_id"] = self.plan_approval_id
        return claims

    def message(self) -> bytes:
        """The bytes the HMAC covers: version, then the claims as sorted compact JSON."""
        body = json.dumps(self.claims(), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return f"moat start {self.version}\n{body}".encode()


_WITH_REQUESTER = (CLAIMS_VERSION, CLAIMS_VERSION_PLAN_APPROVED)


class PlanClaims(BaseModel):
    """What a gateway vouches for when it starts (or resumes) a plan: the tenant, plan and
    key, the exact steps (the raw document's digest), and on whose behalf (the key and its
    scopes). A worker signs a step's start only for a plan whose claims verify."""

    model_config = ConfigDict(frozen=True)

    workflow_id: str
    tenant_id: str
    plan_id: str
    idempotency_key: str | None
    idempotency_ttl_seconds: int
    plan_digest: str
    specs_digest: str
    plan_hash: str
    dry_run: bool
    scopes: list[str]
    api_key_id: str
    resume: dict[str, Any] | None

    @property
    def version(self) -> str:
        return PLAN_CLAIMS_VERSION

    @classmethod
    def of(cls, run: PlanWorkflowInput, workflow_id: str) -> PlanClaims:
        return cls(
            workflow_id=workflow_id,
            tenant_id=run.tenant_id,
            plan_id=run.plan_id,
            idempotency_key=run.idempotency_key,
            idempotency_ttl_seconds=run.idempotency_ttl_seconds,
            plan_digest=input_digest(run.plan),
            specs_digest=input_digest({k: _capability(v) for k, v in sorted(run.specs.items())}),
            plan_hash=run.plan_hash,
            dry_run=run.dry_run,
            scopes=list(run.scopes),
            api_key_id=run.api_key_id,
            resume=None if run.resume is None else run.resume.model_dump(mode="json"),
        )

    def message(self) -> bytes:
        claims = self.model_dump(mode="json")
        body = json.dumps(claims, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return f"moat plan {self.version}\n{body}".encode()


def _signed_ref(ref: ExecutionRef, workflow_id: str) -> ExecutionRef:
    """The part of an execution's ref a start vouches for, under ``workflow_id``."""
    return ExecutionRef.model_validate(
        {**ref.model_dump(include=set(SIGNED_REF_FIELDS)), "workflow_id": workflow_id}
    )


class DecisionClaims(BaseModel):
    """What a gateway vouches for when it sends a person's approval decision to a run: the
    run and approval, the decision and the exact call and policy version it binds, and who
    decided with which scopes (checked by the gateway, checked again where the decision is
    recorded). Signed with the start keyring, under its own version, so a start's
    signature can never pass for a decision's."""

    model_config = ConfigDict(frozen=True)

    tenant_id: str
    workflow_id: str
    approval_id: str
    action: str
    input_hash: str
    policy_version: int
    decided_by: str
    decider_scopes: list[str]
    comment: str | None
    in_session: bool = False

    @property
    def version(self) -> str:
        return DECISION_VERSION

    @classmethod
    def of(cls, tenant_id: str, workflow_id: str, verdict: ApprovalVerdict) -> DecisionClaims:
        return cls(
            tenant_id=tenant_id,
            workflow_id=workflow_id,
            **verdict.model_dump(exclude={"signature"}),
        )

    def message(self) -> bytes:
        # ``in_session`` is signed when set; a decision without it signs as it always has.
        claims = self.model_dump(mode="json", exclude=None if self.in_session else {"in_session"})
        body = json.dumps(claims, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return f"moat decision {self.version}\n{body}".encode()
