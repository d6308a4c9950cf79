"""Webhooks, the outbox and dead letters: the event types a tenant can subscribe to, the
API's shapes, the delivery workflow's input and output, and the ids derived from what they
name (so a retried step or a restarted relay finds the same ones)."""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from schemas.hosts import IPV6_PATTERN

_NAMESPACE = uuid.UUID("a3c1f0de-7b54-4d0e-9f1a-52e6b8c3d911")

WEBHOOK_SECRET_PREFIX = "whsec_"
# Standard Webhooks: the old secret keeps signing beside the new one for a day.
ROTATION_OVERLAP_HOURS = 24
DEFAULT_MAX_RETRIES = 3
DEFAULT_RETRY_BASE_SECONDS = 2.0
# What a URL must be for a delivery to be sent to it at all (else `webhook_url_invalid`):
# http(s), a host (a name or a bracketed IPv6 address), a port up to 65535, no white space.
WEBHOOK_URL_PATTERN = (
    rf"^[Hh][Tt][Tt][Pp][Ss]?://(?:[A-Za-z0-9._~-]+|\[{IPV6_PATTERN}\])"
    r"(?::(?:[0-9]{1,4}|[0-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?"
    r"(?:[/?#][!-~]*)?$"
)


class WebhookEventType(StrEnum):
    EXECUTION_COMPLETED = "execution.completed"
    EXECUTION_FAILED = "execution.failed"
    EXECUTION_DEAD_LETTERED = "execution.dead_lettered"
    APPROVAL_REQUESTED = "approval.requested"
    APPROVAL_DECIDED = "approval.decided"
    CONNECTION_NEEDS_REAUTH = "connection.needs_reauth"


class OutboxStatus(StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    DEAD_LETTER = "dead_letter"


class SubscriptionStatus(StrEnum):
    ACTIVE = "active"
    DISABLED = "disabled"
    REMOVED = "removed"


class DeadLetterKind(StrEnum):
    DELIVERY = "delivery"
    EXECUTION = "execution"


class DeadLetterStatus(StrEnum):
    OPEN = "open"
    REQUEUED = "requeued"
    RESOLVED = "resolved"


def derived_id(*parts: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, "|".join(parts)))


def webhook_id_for(event_id: str) -> str:
    """The ``webhook-id`` of an event: the same on every attempt and after a requeue."""
    return f"msg_{event_id}"


def delivery_workflow_id(outbox_id: str, generation: int) -> str:
    """One delivery workflow per outbox row and requeue: a relay that starts it twice gets
    the running one back."""
    return f"moat-outbox-{outbox_id}-{generation}"


def execution_dead_letter_id(receipt_id: str) -> str:
    return derived_id("dead-letter", "execution", receipt_id)


def delivery_dead_letter_id(outbox_id: str, generation: int) -> str:
    return derived_id("dead-letter", "delivery", outbox_id, str(generation))


def compensating_action_id(receipt_id: str) -> str:
    return derived_id("compensating-action", receipt_id)


def compensating_action_ref(receipt_id: str) -> str:
    """What a dead-lettered run's manifest names: the record's API path."""
    return f"/v1/compensating-actions/{compensating_action_id(receipt_id)}"


class WebhookCreate(BaseModel):
    url: str = Field(
        max_length=2000,
        json_schema_extra={"pattern": WEBHOOK_URL_PATTERN},
        description="The endpoint: http(s) with a host. A host that is an address literal "
        "must be public or allow-listed (`400 webhook_url_not_allowed`); a name is judged "
        "resolved, at each delivery.",
    )
    events: list[WebhookEventType] = Field(min_length=1, max_length=len(WebhookEventType))
    max_retries: int = Field(
        default=DEFAULT_MAX_RETRIES, ge=0, le=30, description="Retries before dead letter."
    )
    retry_base_seconds: float = Field(
        default=DEFAULT_RETRY_BASE_SECONDS,
        gt=0,
        le=3600,
        description="After the n-th failure wait base * 2^(n-1) s (with jitter).",
    )


class Webhook(BaseModel):
    id: str
    url: str
    events: list[str]
    status: SubscriptionStatus
    disabled_reason: str | None = None
    max_retries: int
    retry_base_seconds: float
    previous_secret_expires_at: datetime | None = None
    created_at: datetime


class WebhookWithSecret(Webhook):
    secret: str = Field(description="The signing secret (`whsec_…`); shown this once only.")


class WebhookList(BaseModel):
    items: list[Webhook]
    next_cursor: str | None = Field(
        default=None,
        description="Opaque cursor of the next page (pass it as `cursor`); null on the last.",
    )


class Delivery(BaseModel):
    id: str
    outbox_id: str
    webhook_id: str
    event_type: str
    attempt: int
    attempted_at: datetime
    http_status: int | None
    latency_ms: int
    outcome: str
    error: str | None


class DeliveryList(BaseModel):
    items: list[Delivery]
    next_cursor: str | None = Field(
        default=None,
        description="Opaque cursor of the next page (pass it as `cursor`); null on the last.",
    )


class DeadLetter(BaseModel):
    id: str
    kind: DeadLetterKind
    subject_id: str
    reason: str
    error_code: str | None = None
    status: DeadLetterStatus
    created_at: datetime
    closed_at: datetime | None = None
    closed_by: str | None = None
    note: str | None = None
    requeued_as: str | None = None
    compensating_action_id: str | None = None


class DeadLetterList(BaseModel):
    items: list[DeadLetter]
    next_cursor: str | None = Field(
        default=None,
        description="Opaque cursor of the next page (pass it as `cursor`); null on the last.",
    )


class RequeueRequest(BaseModel):
    effect_did_not_happen: bool = Field(
        default=False,
        description="For an execution: the operator states the effect did not take place, "
        "so a new attempt (under a new downstream key) cannot double it.",
    )
    note: str = Field(default="", max_length=2000)


class ResolveRequest(BaseModel):
    note: str = Field(min_length=1, max_length=2000)


class CompensatingAction(BaseModel):
    id: str
    receipt_id: str
    dead_letter_id: str
    attempted: dict[str, Any]
    effect: str
    operator_actions: list[dict[str, Any]]
    created_at: datetime
    updated_at: datetime


class DeliveryInput(BaseModel):
    """The delivery workflow's one input."""

    tenant_id: str
    outbox_id: str
    generation: int


class DeliveryGiveUp(BaseModel):
    """What the delivery workflow hands the dead-letter step when its attempt activity kept
    failing (a worker lost mid-send, Postgres away): the row, and why, in Moat's words."""

    tenant_id: str
    outbox_id: str
    generation: int
    error: str


class AttemptResult(BaseModel):
    """One attempt's verdict: ``final`` when the row is delivered, dead-lettered or no
    longer this workflow's; else wait ``retry_in_seconds`` and try again."""

    final: bool
    status: str
    retry_in_seconds: float = 0.0
