"""The approval's Slack message: what it shows, escaped so an agent's input cannot ping a
channel or fake a link, within Slack's limits, and buttons carrying the exact binding."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from schemas.approvals import Approval, ApprovalStatus
from schemas.slack_approvals import (
    SUMMARY_CHARS,
    ButtonValue,
    input_summary,
    is_announcement_key,
    outcome_blocks,
    request_blocks,
)


def approval(**changes: object) -> Approval:
    now = datetime.now(UTC)
    fields: dict[str, object] = {
        "id": "apr_0123",
        "status": ApprovalStatus.PENDING,
        "receipt_id": "r1",
        "workflow_id": "w1",
        "capability_id": "http.request",
        "capability_version": "1.0.0",
        "input_hash": "sha256:" + "a" * 64,
        "policy_version": 3,
        "requested_by": "key:k1",
        "requested_at": now,
        "expires_at": now + timedelta(hours=1),
    }
    return Approval.model_validate(fields | changes)


def test_input_cannot_ping_or_link() -> None:
    summary = input_summary({"text": "<!channel> see <https://evil|here> & <@U1>"})
    assert "<" not in summary and ">" not in summary
    assert "&lt;!channel&gt;" in summary and "&amp;" in summary


def test_summary_is_cut_whole() -> None:
    summary = input_summary({"text": "<" * 5000})
    assert len(summary) <= SUMMARY_CHARS
    assert summary.endswith("&lt;…") or summary.endswith("…")
    assert not summary.removesuffix("…").endswith(("&", "&l", "&lt"))


def test_buttons_carry_the_binding_and_the_outcome_has_none() -> None:
    shown = approval()
    blocks = request_blocks(shown, input_summary({"a": 1}))
    buttons = next(b for b in blocks if b["type"] == "actions")["elements"]
    for button in buttons:
        value = ButtonValue.model_validate_json(button["value"])
        assert (value.approval_id, value.input_hash, value.policy_version) == (
            shown.id,
            shown.input_hash,
            shown.policy_version,
        )
        assert len(button["value"]) <= 2000  # Slack's limit on a button's value
    decided = approval(
        status=ApprovalStatus.REJECTED, decided_by="person:ann", decided_at=datetime.now(UTC)
    )
    after = outcome_blocks(decided)
    assert not any(b["type"] == "actions" for b in after)
    assert "Rejected by person:ann" in json.dumps(after)


def test_announcements_are_not_announced() -> None:
    assert is_announcement_key("approval/apr_1/announce")
    assert is_announcement_key("approval/apr_1/outcome")
    assert not is_announcement_key("approval/apr_1")
