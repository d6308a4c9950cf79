"""Policy documents and approvals: the tenant's versioned rules, and the person's decision
an execution of a capability that requires one waits for.

A policy document is the whole of a tenant's policy: its mode and its rules. Each ``PUT``
stores a new version; a decision names the version it used, and an approval is bound to
that version and to the exact call (its ``input_hash``).
"""

from __future__ import annotations

import fnmatch
import hashlib
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    model_validator,
)

from schemas.identity import ExecutionRef, nest_ref
from schemas.records import PolicyMode
from schemas.scopes import missing_scopes

APPROVALS_WRITE = "approvals:write"
POLICY_WRITE = "policy:write"
DEFAULT_APPROVAL_TTL_SECONDS = 24 * 3600
MAX_APPROVAL_TTL_SECONDS = 30 * 24 * 3600
MAX_RULES = 200
MAX_COMMENT = 1000
# The approver an API key is named by in approvals (``key:<id>``); the admin key is ``admin``.
ADMIN_ACTOR = "admin"


def key_actor(key_id: str) -> str:
    return f"key:{key_id}"


def _storable(text: str) -> str:
    """Text is stored as it is: no NUL, no lone surrogate (Postgres holds neither)."""
    if "\x00" in text:
        raise ValueError("text may not hold NUL characters")
    try:
        text.encode()
    except UnicodeEncodeError:
        raise ValueError("text may not hold lone surrogates") from None
    return text


StorableText = Annotated[str, AfterValidator(_storable)]


def _integer(value: Any) -> Any:
    """A JSON integer (``3`` or ``3.0``), never a boolean or a numeric string."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError("must be an integer")


Integer = Annotated[int, BeforeValidator(_integer)]
APPROVER_PATTERN = r"^(?:scope:[a-z][a-z0-9_-]*:[A-Za-z0-9_.*-]+|key:[A-Za-z0-9]+|admin)$"


class PolicyBudget(BaseModel):
    model_config = ConfigDict(extra="forbid")

    limit: Integer = Field(ge=0, le=2**62)
    period: Literal["day", "month"]


class PolicyRule(BaseModel):
    """What applies to the capabilities ``capability`` names: an id (``slack.post_message``)
    or a pattern (``slack.*``, ``*``). The first rule that matches applies."""

    model_config = ConfigDict(extra="forbid")

    capability: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.*?\-\[\]]+$")
    requires_approval: StrictBool | None = Field(
        default=None,
        description="In `strict` mode, wait for a person's approval; unset: the catalog "
        "entry's `requires_approval` decides.",
    )
    approval_ttl_seconds: Integer = Field(
        default=DEFAULT_APPROVAL_TTL_SECONDS, ge=1, le=MAX_APPROVAL_TTL_SECONDS
    )
    approvers: list[Annotated[str, Field(max_length=200, pattern=APPROVER_PATTERN)]] = Field(
        default_factory=lambda: [f"scope:{APPROVALS_WRITE}"],
        max_length=20,
        description="Who may decide: `scope:approvals:write` (any key with the scope; the "
        "admin key always may).",
    )
    allow_self_approval: StrictBool = Field(
        default=False,
        description="Let the key that made the call approve it (separation of duties is "
        "the default).",
    )
    budget: PolicyBudget | None = None

    def matches(self, capability_id: str) -> bool:
        return fnmatch.fnmatchcase(capability_id, self.capability)


class PolicyDocument(BaseModel):
    """Body of ``PUT /v1/policy``: the tenant's whole policy."""

    model_config = ConfigDict(extra="forbid")

    mode: PolicyMode = PolicyMode.STANDARD
    rules: list[PolicyRule] = Field(default_factory=list, max_length=MAX_RULES)

    def rule_for(self, capability_id: str) -> PolicyRule | None:
        return next((r for r in self.rules if r.matches(capability_id)), None)


class PolicyVersion(PolicyDocument):
    """A stored version of a tenant's policy. Version 0 is the tenant's mode from before it
    had a document (no rules)."""

    model_config = ConfigDict(extra="ignore")

    version: int = Field(ge=0)
    created_at: datetime | None = None
    created_by: str = ""


class ApprovalStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"


class Approval(BaseModel):
    """A request for a person's approval of one exact call, and its decision."""

    id: str
    status: ApprovalStatus
    receipt_id: str
    workflow_id: str
    capability_id: str
    capability_version: str
    input_hash: str = Field(description="The digest of the call being approved.")
    policy_version: int
    requested_by: str = Field(description="The key that made the call (`key:<id>`).")
    requested_at: datetime
    expires_at: datetime
    decided_by: str | None = None
    decided_at: datetime | None = None
    comment: str | None = None
    approved_digest: str | None = Field(
        default=None, description="The input_hash the person decided on."
    )
    input: Any = Field(default=None, description="The call's input, redacted (reads only).")


class ApprovalRef(BaseModel):
    """The approval an ``accepted`` execution waits for, in its envelope: decide it with
    ``POST /v1/approvals/{id}/approve`` (or ``reject``) giving this ``input_hash`` and
    ``policy_version``."""

    id: str
    status: ApprovalStatus
    input_hash: str
    capability_id: str
    capability_version: str
    policy_version: int
    expires_at: datetime

    @classmethod
    def of(cls, approval: Approval) -> ApprovalRef:
        return cls.model_validate(approval.model_dump(include=set(cls.model_fields)))


class ApprovalDecision(BaseModel):
    """Body of ``POST /v1/approvals/{id}/approve|reject``: what the person saw and decides
    on. Both must equal the pending request's, or nothing changes (`approval_mismatch`)."""

    model_config = ConfigDict(extra="forbid")

    input_hash: StorableText = Field(min_length=1, max_length=80)
    policy_version: Integer = Field(ge=0, le=2**31 - 1)
    comment: StorableText | None = Field(default=None, max_length=MAX_COMMENT)


ApprovalAction = Literal["approve", "reject", "expire"]


class ApprovalVerdict(BaseModel):
    """The argument of the run's approval update, and of the activity that records it.

    A person's decision is signed by the gateway that checked the decider
    (``schemas.start.DecisionClaims``); the activity recording it checks the signature and
    the approver rules again, so a decision sent straight through Temporal is refused."""

    approval_id: str
    action: ApprovalAction
    input_hash: str = ""
    policy_version: int = 0
    decided_by: str = ""
    comment: str | None = None
    decider_scopes: list[str] = Field(
        default_factory=list, description="The deciding key's scopes (none for `admin`)."
    )
    signature: str = Field(default="", description="The gateway's signature of the decision.")


class ApprovalRecordInput(BaseModel):
    tenant_id: str
    receipt_id: str
    run_id: str
    verdict: ApprovalVerdict


class ApprovalRecorded(BaseModel):
    """The approval after the activity; ``refusal`` is set when nothing changed because the
    decision is no longer possible (``approval_stale``, ``approval_expired``)."""

    approval: Approval
    refusal: str | None = None


class ApprovalRequestInput(BaseModel):
    """The approval activity's input: the call a person is asked about."""

    ref: ExecutionRef
    capability_id: str
    capability_version: str
    policy_version: int
    requested_by: str
    ttl_seconds: int
    allow_self_approval: bool = False
    input: dict[str, Any] = Field(description="The call's input, redacted.")

    @model_validator(mode="before")
    @classmethod
    def _flat_shape(cls, data: Any) -> Any:
        """The flat shape (the ref's fields among the input's own), which histories
        of open runs hold, reads into the ref."""
        return nest_ref(data)


def may_decide(approvers: list[str], actor: str, scopes: list[str]) -> bool:
    """Whether ``actor`` is one of a rule's ``approvers``: ``key:<id>`` names a key,
    ``scope:<scope>`` any key holding that scope; ``admin`` always may."""
    if actor == ADMIN_ACTOR:
        return True
    for approver in approvers:
        if approver == actor:
            return True
        if approver.startswith("scope:") and not missing_scopes(scopes, [approver[6:]]):
            return True
    return False


def approval_id_for(receipt_id: str) -> str:
    """An execution's approval has a fixed id: a retried or reset step finds it again."""
    return "apr_" + hashlib.sha256(f"approval|{receipt_id}".encode()).hexdigest()[:24]
