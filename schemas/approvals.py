"""Approvals: the person's decision an execution of a capability that requires one waits
for, bound to the policy version that asked for it and to the exact call (its
``input_hash``). The rule that asks for one (its approvers, its time to live) is the
policy's (``schemas.policy``).
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from schemas.identity import ExecutionRef, nest_ref
from schemas.jsonvalues import STORABLE_TEXT_PATTERN
from schemas.policy import Integer
from schemas.scopes import missing_scopes

MAX_COMMENT = 1000
# The approver an API key is named by in approvals (``key:<id>``); the admin key is ``admin``;
# one of the tenant's people (signed in to the console, or a mapped Slack user) is
# ``person:<handle>``.
ADMIN_ACTOR = "admin"
KEY_ACTOR_PREFIX = "key:"
PERSON_ACTOR_PREFIX = "person:"
PERSON_HANDLE_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"


def key_actor(key_id: str) -> str:
    return f"{KEY_ACTOR_PREFIX}{key_id}"


def person_actor(handle: str) -> str:
    return f"{PERSON_ACTOR_PREFIX}{handle}"


def deciding_actor(actor: str) -> bool:
    """Whether ``actor`` names who may decide with scopes of their own: a key or a person
    (the admin key decides without scopes)."""
    return actor.startswith((KEY_ACTOR_PREFIX, PERSON_ACTOR_PREFIX))


def _storable(text: str) -> str:
    """Text is stored as it is: no NUL, no lone surrogate (Postgres holds neither)."""
    if "\x00" in text:
        raise ValueError("text may not hold NUL characters")
    try:
        text.encode()
    except UnicodeEncodeError:
        raise ValueError("text may not hold lone surrogates") from None
    return text


# The schema states what it can: no NUL (JSON cannot carry a lone surrogate as UTF-8).
StorableText = Annotated[
    str, AfterValidator(_storable), Field(json_schema_extra={"pattern": STORABLE_TEXT_PATTERN})
]


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
    in_session: bool = Field(
        default=False,
        description="Decided by the requesting key in its own MCP session, through the "
        "elicitation form a rule with `approve_in_session` allows; signed with the rest.",
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
