"""Policy documents: the tenant's versioned rules.

A policy document is the whole of a tenant's policy: its mode and its rules. Each ``PUT``
stores a new version; a decision names the version it used, and an approval
(``schemas.approvals``) is bound to that version and to the exact call (its ``input_hash``).
A rule says who may approve a call and for how long it waits.
"""

from __future__ import annotations

import fnmatch
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool

from schemas.records import PolicyMode
from schemas.scopes import APPROVALS_WRITE

DEFAULT_APPROVAL_TTL_SECONDS = 24 * 3600
MAX_APPROVAL_TTL_SECONDS = 30 * 24 * 3600
MAX_RULES = 200


def _integer(value: Any) -> Any:
    """A JSON integer (``3`` or ``3.0``), never a boolean or a numeric string."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError("must be an integer")


Integer = Annotated[int, BeforeValidator(_integer)]
APPROVER_PATTERN = (
    r"^(?:scope:[a-z][a-z0-9_-]*:[A-Za-z0-9_.*-]+|key:[A-Za-z0-9]+"
    r"|person:[a-z0-9][a-z0-9._-]{0,63}|admin)$"
)


class PolicyBudget(BaseModel):
    model_config = ConfigDict(extra="forbid")

    limit: Integer = Field(ge=0, le=2**62)
    period: Literal["day", "month"]


# Characters that make a rule's ``capability`` a pattern (``fnmatch``).
PATTERN_CHARS = frozenset("*?[]")


class PolicyRule(BaseModel):
    """What applies to the capabilities ``capability`` names: an id (``slack.post_message``)
    or a pattern (``slack.*``, ``*``). The first rule that matches applies. A rule with a
    budget names one capability, not a pattern."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "if": {"properties": {"budget": {"type": "object"}}, "required": ["budget"]},
            "then": {"properties": {"capability": {"pattern": r"^[^*?\[\]]*$"}}},
        },
    )

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
        description="Who may decide: `scope:approvals:write` (any key or person with the "
        "scope), `key:<id>` (one key), `person:<handle>` (one of the tenant's people); the "
        "admin key always may.",
    )
    allow_self_approval: StrictBool = Field(
        default=False,
        description="Let the key that made the call approve it (separation of duties is "
        "the default).",
    )
    approve_in_session: StrictBool = Field(
        default=False,
        description="Let the person who made the call approve or reject it in their own MCP "
        "session, through the form the MCP server shows them (elicitation); no other door "
        "lets the requesting key decide.",
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
