"""What an execution's effect left at the provider, as its receipt records it (and so the
transparency log proves): the object made or changed, where to see it, and, when the effect
was an earlier attempt's found by a ``reconcile`` look-up, how it was found.

Identifiers and links only, never the content: a message's channel and ``ts``, an issue's
number, node id and URL, a page's id, an e-mail's ``Message-ID``, an HTTP answer's status
and the SHA-256 of its bytes.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


class ReconcileProof(BaseModel):
    """How a repeated attempt found the effect of an earlier one instead of acting again."""

    model_config = ConfigDict(frozen=True)

    looked_in: str = Field(description="What the look-up read, e.g. the history of channel C1.")
    search: dict[str, str] = Field(
        default_factory=dict,
        description="The look-up's request as sent: the provider's method and its parameters.",
    )
    mark: str = Field(
        description="What the earlier attempt left on the object and the look-up matched: "
        "the execution's downstream idempotency key."
    )
    since: datetime | None = Field(
        default=None, description="Where the look-up's window opened (the execution's start)."
    )
    attempt: int = Field(default=1, ge=1, description="The attempt that looked.")


class ProviderEvidence(BaseModel):
    """The provider's own record of the effect: enough to find it there and compare."""

    model_config = ConfigDict(frozen=True)

    provider: str = Field(description="slack, github, notion, email, http or webhook.")
    object_type: str = Field(default="", description="message, issue, page, email, response.")
    object_id: str | None = Field(
        default=None,
        description="The provider's id of the object: a Slack message's channel/ts, an "
        "issue's node id, a page's id, an e-mail's Message-ID, a webhook's webhook-id.",
    )
    permalink: str | None = Field(default=None, description="Where a person sees it.")
    attributes: dict[str, str | int] = Field(
        default_factory=dict,
        description="The provider's other identifiers (Slack channel and ts, issue number).",
    )
    http_status: int | None = None
    response_sha256: str | None = Field(
        default=None, description="sha256:<hex> of the answer's bytes as the provider sent them."
    )
    reconciled: ReconcileProof | None = Field(
        default=None,
        description="Set when the effect is an earlier attempt's, found by a look-up.",
    )
