"""People: a tenant's approvers and admins who are not keys, named ``person:<handle>`` in
approvals, with the scopes the tenant gave them and how they are recognised (an OpenID
Connect issuer and subject for the console, a Slack user id for approvals in Slack)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schemas.api import Scope
from schemas.approvals import PERSON_HANDLE_PATTERN

MAX_ISSUER = 500
MAX_SUBJECT = 255
SLACK_USER_PATTERN = r"^[A-Z0-9]{2,64}$"


class PersonSet(BaseModel):
    """Body of ``PUT /v1/people/{handle}``: the person as they should be from now on."""

    model_config = ConfigDict(extra="forbid")

    display_name: str = Field(default="", max_length=200, pattern=r"^[^\x00-\x1f\x7f]*$")
    scopes: list[Scope] = Field(
        default_factory=list,
        max_length=50,
        description="What the person may do; a key may only give scopes it holds itself.",
    )
    oidc_issuer: str | None = Field(
        default=None,
        max_length=MAX_ISSUER,
        pattern=r"^https?://[^\s\x00-\x1f\x7f]+$",
        description="The OpenID provider's issuer URL, exactly as its ID tokens' `iss`.",
    )
    oidc_subject: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_SUBJECT,
        pattern=r"^[^\x00-\x1f\x7f]+$",
        description="The person's `sub` at that issuer.",
    )
    slack_user_id: str | None = Field(
        default=None, pattern=SLACK_USER_PATTERN, description="The person's Slack user id."
    )

    @model_validator(mode="after")
    def _oidc_pair(self) -> PersonSet:
        if (self.oidc_issuer is None) != (self.oidc_subject is None):
            raise ValueError("oidc_issuer and oidc_subject go together: give both or neither")
        return self


class Person(BaseModel):
    """A tenant's person as answered."""

    tenant_id: str
    handle: str = Field(pattern=PERSON_HANDLE_PATTERN)
    actor: str = Field(description="How approvals name the person: `person:<handle>`.")
    display_name: str
    scopes: list[str]
    oidc_issuer: str | None = None
    oidc_subject: str | None = None
    slack_user_id: str | None = None
    created_by: str
    created_at: datetime
    updated_at: datetime
    disabled_at: datetime | None = None


class PersonPage(BaseModel):
    """``GET /v1/people``: a tenant's people, by handle."""

    items: list[Person]
