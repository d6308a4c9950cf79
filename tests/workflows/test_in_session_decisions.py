"""A decision marked ``in_session`` (the requester's own, in its MCP session) is the one
exception to separation of duties, so it counts only signed, from the requesting key, under
a rule with ``approve_in_session``: a forged one sent straight to the run's update is
refused by the activity that records decisions, and no HTTP route can mark one."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError

from schemas.approvals import Approval, ApprovalVerdict
from schemas.names import DECIDE_APPROVAL_UPDATE
from schemas.start import DecisionClaims
from store.keyrings.start import StartKeyring
from store.models import ApprovalRow
from tests.gateway.test_approvals import decide, pending, setup
from tests.gateway.test_policy import new_key
from tests.support.fakes import FakeProvider
from tests.support.stack import Stack
from tests.workflows.test_signed_decisions import _cause_type

MARKED = {"in_session": True}


def test_a_decision_not_in_session_signs_as_it_always_has() -> None:
    """Decisions signed before the field existed still verify."""
    verdict = ApprovalVerdict(approval_id="apr_1", action="approve", decided_by="key:a")
    plain = DecisionClaims.of("t", "wf", verdict).message()
    assert b"in_session" not in plain
    marked = DecisionClaims.of("t", "wf", verdict.model_copy(update={"in_session": True}))
    assert b'"in_session":true' in marked.message()


async def test_a_forged_in_session_decision_is_refused(
    stack: Stack, provider: FakeProvider
) -> None:
    url = await setup(stack, provider, "/in-session")  # a rule without approve_in_session
    approval = (await pending(stack, url, "in-session-1"))["approval"]
    async with stack.sessions() as s:
        row = await s.get(ApprovalRow, approval["id"])
    assert row is not None
    handle = stack.client.get_workflow_handle(row.workflow_id)
    keys = StartKeyring.from_settings(stack.settings)

    def verdict(**changes: Any) -> ApprovalVerdict:
        fields: dict[str, Any] = {
            "approval_id": approval["id"],
            "action": "approve",
            "input_hash": approval["input_hash"],
            "policy_version": approval["policy_version"],
            "decided_by": row.requested_by,
            "in_session": True,
        }
        return ApprovalVerdict(**(fields | changes))

    def signed(v: ApprovalVerdict) -> ApprovalVerdict:
        return keys.signed_decision(stack.tenant_id, row.workflow_id, v)

    refusals = [
        (verdict(signature="d1.nokey.AAAA"), "decision_not_signed"),
        # A gateway's signature of an ordinary decision, marked in_session afterwards.
        (
            signed(verdict(in_session=False)).model_copy(update={"in_session": True}),
            "decision_not_signed",
        ),
        # Signed, but the rule does not allow the requester to decide in its session.
        (signed(verdict()), "self_approval_forbidden"),
        # Signed in_session for another key than the one that made the call.
        (signed(verdict(decided_by="key:someoneelse")), "forbidden"),
    ]
    for sent, code in refusals:
        with pytest.raises(WorkflowUpdateFailedError) as failed:
            await handle.execute_update(DECIDE_APPROVAL_UPDATE, sent, result_type=Approval)
        assert _cause_type(failed.value) == code, sent
    # The route takes no such field.
    approver = await new_key(stack, ["approvals:write"])
    marked = await decide(stack, approver, approval, in_session=True)
    assert marked.status_code == 400, marked.text
    assert marked.json()["error"]["details"]["errors"][0]["loc"] == ["body", "in_session"]
    async with stack.sessions() as s:
        still = await s.get(ApprovalRow, approval["id"])
    assert still is not None and still.status == "pending"
    assert provider.calls_to("/in-session") == []
