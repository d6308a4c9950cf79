"""Operations alerts: a dead letter, an execution that ended ``outcome_unknown`` and a
connection that needs re-authorising, each announced once to the deployment's operations
channel (a Slack channel or a webhook endpoint) as a normal Moat execution of
``slack.post_message`` or ``webhook.post`` whose idempotency key is the event's own,
``alert/<kind>/<event id>``: a repeated hand-off, a retried step or a reset run sends one
alert per event.

Pure: the message says what happened and where it is handled (the console page, the CLI
command), never a secret or a provider's input.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

SLACK_CAPABILITY = "slack.post_message"
WEBHOOK_CAPABILITY = "webhook.post"
ALERT_KEY_PREFIX = "alert/"


class AlertKind(StrEnum):
    DEAD_LETTER = "dead_letter"
    OUTCOME_UNKNOWN = "outcome_unknown"
    CONNECTION_NEEDS_REAUTH = "connection_needs_reauth"


class AlertInput(BaseModel):
    """What crosses from the step where the event is born to ``AnnounceAlert``: only ids;
    the rest is read again under the tenant's row-level security."""

    tenant_id: str
    kind: AlertKind
    event_id: str = Field(
        description="The dead letter's id, the outcome_unknown execution's receipt id, or "
        "the connection's id."
    )


class Alert(BaseModel):
    """An alert's content, as both channels carry it."""

    kind: AlertKind
    event_id: str
    tenant_id: str
    tenant_name: str
    summary: str
    handle_with: str = Field(description="The CLI command that handles it.")
    console_url: str | None = Field(default=None, description="The console page, when known.")


def alert_key(kind: AlertKind, event_id: str) -> str:
    """The alert's idempotency key: one per event, whoever hands it off and how often."""
    return f"{ALERT_KEY_PREFIX}{kind.value}/{event_id}"


def is_alert_key(idempotency_key: str) -> bool:
    """Whether a call is itself an alert: an alert's own failure is never alerted (it would
    never end); the gauges and ``moat dlq list`` still show it."""
    return idempotency_key.startswith(ALERT_KEY_PREFIX)


def alert_workflow_id(kind: AlertKind, event_id: str) -> str:
    return f"moat-alert/{kind.value}/{event_id}"


# Console page and CLI command per kind ({id} is the event's id).
_HANDLING = {
    AlertKind.DEAD_LETTER: ("/console/dead-letters", "moat dlq show {id}"),
    AlertKind.OUTCOME_UNKNOWN: ("/console/executions/{id}", "moat runs show {id}"),
    AlertKind.CONNECTION_NEEDS_REAUTH: ("/console/connections", "moat connection show {id}"),
}


def alert_for(
    kind: AlertKind,
    event_id: str,
    *,
    tenant_id: str,
    tenant_name: str,
    what: str,
    console_base: str | None,
) -> Alert:
    page, command = _HANDLING[kind]
    return Alert(
        kind=kind,
        event_id=event_id,
        tenant_id=tenant_id,
        tenant_name=tenant_name,
        summary=what,
        handle_with=command.format(id=event_id),
        console_url=(console_base.rstrip("/") + page.format(id=event_id)) if console_base else None,
    )


def slack_text(alert: Alert) -> str:
    where = f" or <{alert.console_url}|the console>" if alert.console_url else ""
    return (
        f":rotating_light: Moat {alert.kind.value.replace('_', ' ')} in tenant "
        f"{alert.tenant_name} ({alert.tenant_id}): {alert.summary}\n"
        f"Handle it with `{alert.handle_with}`{where}."
    )


def slack_input(alert: Alert, channel: str) -> dict[str, Any]:
    return {"channel": channel, "text": slack_text(alert)}


def webhook_input(alert: Alert, url: str) -> dict[str, Any]:
    return {
        "url": url,
        "event_type": f"moat.alert.{alert.kind.value}",
        "payload": alert.model_dump(mode="json"),
    }


class AlertRouteSet(BaseModel):
    """A tenant's own alert route: its alerts go here instead of the deployment's."""

    connection_id: str = Field(
        max_length=64, description="The tenant's `slack` or `webhook` connection."
    )
    target: str = Field(
        min_length=1,
        max_length=2000,
        description="The Slack channel's id (C…) for a `slack` connection, the endpoint's URL "
        "for a `webhook` one.",
    )


class AlertRoute(BaseModel):
    connection_id: str
    target: str
    created_by: str
    created_at: datetime
    updated_at: datetime
