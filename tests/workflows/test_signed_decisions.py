"""Approval decisions reach a run only signed by a gateway: a decision sent straight
through Temporal without a valid signature is refused and nothing is recorded, and the step
that records a decision checks the approver rules again (separation of duties, the
approvals scope) against the signed decider."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError

from schemas.approvals import Approval, ApprovalVerdict
from schemas.names import DECIDE_APPROVAL_UPDATE
from store.keyrings.start import StartKeyring
from store.models import ApprovalRow
from tests.gateway.test_approvals import decide, pending, setup
from tests.gateway.test_policy import new_key
from tests.support.fakes import FakeProvider
from tests.support.stack import Stack


def _cause_type(err: BaseException) -> str | None:
    cause: BaseException | None = err
    while cause is not None:
        kind = getattr(cause, "type", None)
        if isinstance(kind, str):
            return kind
        cause = cause.__cause__
    return None


async def test_a_decision_sent_past_the_gateway_is_refused(
    stack: Stack, provider: FakeProvider
) -> None:
    url = await setup(stack, provider, "/signed")
    envelope = await pending(stack, url, "signed-1")
    approval = envelope["approval"]
    async with stack.sessions() as s:
        row = await s.get(ApprovalRow, approval["id"])
    assert row is not None
    handle = stack.client.get_workflow_handle(row.workflow_id)
    requester = row.requested_by
    keys = StartKeyring.from_settings(stack.settings)

    def verdict(**changes: Any) -> ApprovalVerdict:
        fields: dict[str, Any] = {
            "approval_id": approval["id"],
            "action": "approve",
            "input_hash": approval["input_hash"],
            "policy_version": approval["policy_version"],
            "decided_by": "key:someoneelse",
            "decider_scopes": ["approvals:write"],
        }
        return ApprovalVerdict(**(fields | changes))

    def signed(v: ApprovalVerdict) -> ApprovalVerdict:
        return keys.signed_decision(stack.tenant_id, row.workflow_id, v)

    refusals = [
        (verdict(), "decision_not_signed"),  # no signature
        (verdict(signature="d1.nokey.AAAA"), "decision_not_signed"),
        # Signed for another decider than the one it names.
        (signed(verdict()).model_copy(update={"decided_by": "admin"}), "decision_not_signed"),
        # Signed, but for another run.
        (keys.signed_decision(stack.tenant_id, "another-run", verdict()), "decision_not_signed"),
        # Signed for the key that made the call: separation of duties holds here too.
        (signed(verdict(decided_by=requester)), "self_approval_forbidden"),
        # Signed for a key without the approvals scope.
        (signed(verdict(decider_scopes=["execute:*"])), "forbidden"),
    ]
    for sent, code in refusals:
        with pytest.raises(WorkflowUpdateFailedError) as failed:
            await handle.execute_update(DECIDE_APPROVAL_UPDATE, sent, result_type=Approval)
        assert _cause_type(failed.value) == code, (sent, failed.value)
        async with stack.sessions() as s:
            still = await s.get(ApprovalRow, approval["id"])
        assert still is not None and still.status == "pending", sent
    assert provider.calls_to("/signed") == []

    # Through the gateway, by another key with the scope: decided, executed once.
    approver = await new_key(stack, ["approvals:write"])
    decided = await decide(stack, approver, approval)
    assert decided.status_code == 200, decided.text
    assert decided.json()["status"] == "approved"
