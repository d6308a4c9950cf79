"""Approvals in Slack: a tenant's approvals channel, the message that announces a new
approval there (Block Kit, with Approve / Reject buttons) and the one that replaces it once
decided, and what crosses from the request step to the workflow that posts them.

The buttons carry what the person is shown (the approval's id, digest and policy version)
in their ``value``, so a click decides on exactly that, never on a value read again later.
Pure: no I/O, so the gateway, the activities and the tests build the same messages.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.approvals import Approval, ApprovalStatus
from schemas.capabilities import SlackChannel
from schemas.run import ExecuteWorkflowInput

CHANNEL_KIND_SLACK = "slack"
# The capabilities the announcements run as; the key configuring the channel must hold
# the scopes to execute both (its authority is the announcements').
POST_CAPABILITY = "slack.post_message"
UPDATE_CAPABILITY = "slack.update_message"
APPROVE_ACTION = "moat_approve"
REJECT_ACTION = "moat_reject"
# How much of the redacted input a message shows (Slack's section text holds 3000).
SUMMARY_CHARS = 1500

Stage = Literal["requested", "decided"]


class ApprovalChannelSet(BaseModel):
    """``PUT /v1/approvals/channel``: post the tenant's new approvals to ``channel`` through
    the Slack connection ``connection_id``; ``signing_secret`` is the Slack app's (its
    Basic Information page), which signs the buttons' interactions. Never shown again."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    connection_id: str = Field(min_length=1, max_length=64)
    channel: SlackChannel = Field(description="The channel's id (C…, G…), not its name.")
    signing_secret: str = Field(min_length=16, max_length=200, repr=False)


class ApprovalChannel(BaseModel):
    """The tenant's approvals channel, as the API shows it: never the signing secret."""

    kind: str = CHANNEL_KIND_SLACK
    connection_id: str
    channel: str
    created_by: str = Field(description="The key that configured it (`key:<id>`).")
    created_at: datetime
    updated_at: datetime
    interactivity_path: str = Field(
        description="The path of the Slack app's Interactivity Request URL, on the gateway."
    )


class AnnounceInput(BaseModel):
    """Input of ``AnnounceApproval``: which approval, and which message (the request, or
    the outcome replacing it)."""

    tenant_id: str
    approval_id: str
    stage: Stage


class AnnounceStart(BaseModel):
    """The signed start of the announcing execution, or why there is none."""

    request: ExecuteWorkflowInput | None = None
    workflow_id: str | None = None
    skipped: str | None = None


class AnnounceResult(BaseModel):
    receipt_id: str | None = None
    status: str | None = None
    skipped: str | None = None


def announce_key(approval_id: str, stage: Stage) -> str:
    """The idempotency key of the execution posting (or updating) the approval's message:
    one per approval and stage, so a repeated hand-off is one message."""
    return f"approval/{approval_id}/{'announce' if stage == 'requested' else 'outcome'}"


def announce_workflow_id(tenant_id: str, approval_id: str, stage: Stage) -> str:
    return f"moat-announce/{tenant_id}/{approval_id}/{stage}"


def interactivity_path(tenant_id: str) -> str:
    return f"/v1/slack/interactions/{tenant_id}"


class ButtonValue(BaseModel):
    """What a button carries: the approval and the exact call and policy it showed."""

    model_config = ConfigDict(extra="forbid")

    approval_id: str = Field(max_length=64)
    input_hash: str = Field(max_length=200)
    policy_version: int = Field(ge=0)


def button_value(approval: Approval) -> str:
    value = ButtonValue(
        approval_id=approval.id,
        input_hash=approval.input_hash,
        policy_version=approval.policy_version,
    )
    return json.dumps(value.model_dump(), separators=(",", ":"))


def _text(markdown: str) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": markdown}


def _plain(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text}


def _escaped(text: str) -> str:
    """Slack's own escaping: ``&``, ``<`` and ``>`` are control characters in its text."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def input_summary(redacted: Any) -> str:
    """The redacted input as the message shows it: compact JSON, escaped for Slack (so an
    input's ``<!channel>`` or ``<@U…>`` pings nobody), cut to ``SUMMARY_CHARS``."""
    text = json.dumps(redacted, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    escaped = _escaped(text)
    if len(escaped) <= SUMMARY_CHARS:
        return escaped
    cut = escaped[: SUMMARY_CHARS - 1]
    entity = cut.rfind("&")
    if entity >= 0 and ";" not in cut[entity:]:
        cut = cut[:entity]  # never half an escape
    return cut + "…"


def _facts(approval: Approval) -> list[dict[str, Any]]:
    return [
        _text(f"*Capability*\n`{_escaped(approval.capability_id)}`"),
        _text(f"*Asked by*\n`{_escaped(approval.requested_by)}`"),
        _text(f"*Digest*\n`{_escaped(approval.input_hash)}`"),
        _text(f"*Policy version*\n{approval.policy_version}"),
        _text(f"*Expires*\n{approval.expires_at.isoformat()}"),
        _text(f"*Approval*\n`{_escaped(approval.id)}`"),
    ]


def request_text(approval: Approval) -> str:
    return f"Approval needed: {approval.capability_id} asked by {approval.requested_by}"


def request_blocks(approval: Approval, summary: str) -> list[dict[str, Any]]:
    """The new approval: what (capability, redacted input as ``input_summary`` gives it),
    who asked, digest, policy version, expiry, and the two buttons carrying the approval,
    digest and version."""
    value = button_value(approval)
    return [
        {"type": "header", "text": _plain("Approval needed")},
        {"type": "section", "fields": _facts(approval)},
        {"type": "section", "text": _text(f"*Input (redacted)*\n```{summary}```")},
        {
            "type": "actions",
            "block_id": "moat_decision",
            "elements": [
                {
                    "type": "button",
                    "action_id": APPROVE_ACTION,
                    "style": "primary",
                    "text": _plain("Approve"),
                    "value": value,
                },
                {
                    "type": "button",
                    "action_id": REJECT_ACTION,
                    "style": "danger",
                    "text": _plain("Reject"),
                    "value": value,
                },
            ],
        },
    ]


_OUTCOME_WORDS = {
    ApprovalStatus.APPROVED: "Approved",
    ApprovalStatus.REJECTED: "Rejected",
    ApprovalStatus.EXPIRED: "Expired",
}


def outcome_text(approval: Approval) -> str:
    word = _OUTCOME_WORDS.get(approval.status, approval.status.value)
    who = approval.decided_by or "moat"
    when = approval.decided_at.isoformat() if approval.decided_at else "-"
    return f"{word} by {who} at {when}: {approval.capability_id} ({approval.id})"


def outcome_blocks(approval: Approval) -> list[dict[str, Any]]:
    """The decided approval: the same facts, the outcome (who, when) and no buttons."""
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": _plain(_OUTCOME_WORDS.get(approval.status, "Decided"))},
        {"type": "section", "fields": _facts(approval)},
        {"type": "section", "text": _text(_escaped(outcome_text(approval)))},
    ]
    if approval.comment:
        blocks.append({"type": "context", "elements": [_text(_escaped(approval.comment))]})
    return blocks


def is_announcement_key(idempotency_key: str) -> bool:
    """Whether a call is itself an approval's announcement: its own approval (a policy
    asking approval for Slack posts) is not announced, or announcements would never end."""
    return idempotency_key.startswith("approval/") and idempotency_key.endswith(
        ("/announce", "/outcome")
    )
