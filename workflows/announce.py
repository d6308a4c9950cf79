"""``AnnounceApproval``: posts an approval's Slack message (or replaces it with the
outcome) as a normal execution, ``ExecuteCapability`` as a child, like a probe's run.

Started by the approval steps (``activities.approvals``) under an id derived from the
approval and the stage; the child's idempotency key is the approval's too
(``approval/<id>/announce``, ``approval/<id>/outcome``), so a repeated hand-off, a retried
step or a reset run posts one message per approval and one update per decision.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import (
    RetryPolicy,
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
)
from temporalio.exceptions import ApplicationError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from schemas.names import (
        ANNOUNCE_APPROVAL_WORKFLOW,
        CAPABILITY_ATTRIBUTE,
        EXECUTE_WORKFLOW,
        IDEMPOTENCY_KEY_ATTRIBUTE,
        IDEMPOTENCY_KEY_ATTRIBUTE_LENGTH,
        PREPARE_ANNOUNCEMENT,
        RECEIPT_ATTRIBUTE,
        TENANT_ATTRIBUTE,
    )
    from schemas.run import ExecuteResult
    from schemas.slack_approvals import AnnounceInput, AnnounceResult, AnnounceStart
    from workflows.fairness import tenant_priority


@workflow.defn(name=ANNOUNCE_APPROVAL_WORKFLOW)
class AnnounceApproval:
    @workflow.run
    async def run(self, inp: AnnounceInput) -> AnnounceResult:
        start: AnnounceStart = await workflow.execute_activity(
            PREPARE_ANNOUNCEMENT,
            inp,
            result_type=AnnounceStart,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10), maximum_attempts=5),
            priority=tenant_priority(inp.tenant_id),
        )
        return await execute_prepared(start)


async def execute_prepared(start: AnnounceStart) -> AnnounceResult:
    """The prepared execution as a child run (``AnnounceApproval``, ``AnnounceAlert``): its
    receipt and status, a refusal's code, or what the preparation skipped and why."""
    if start.request is None or start.workflow_id is None:
        return AnnounceResult(skipped=start.skipped)
    req = start.request
    attributes = TypedSearchAttributes(
        [
            SearchAttributePair(SearchAttributeKey.for_keyword(name), value)
            for name, value in (
                (TENANT_ATTRIBUTE, req.ref.tenant_id),
                (CAPABILITY_ATTRIBUTE, req.capability.id),
                (
                    IDEMPOTENCY_KEY_ATTRIBUTE,
                    req.ref.idempotency_key[:IDEMPOTENCY_KEY_ATTRIBUTE_LENGTH],
                ),
                (RECEIPT_ATTRIBUTE, req.ref.receipt_id),
            )
        ]
    )
    try:
        result: ExecuteResult = await workflow.execute_child_workflow(
            EXECUTE_WORKFLOW,
            req,
            id=start.workflow_id,
            result_type=ExecuteResult,
            search_attributes=attributes,
            priority=tenant_priority(req.ref.tenant_id),
        )
    except ChildWorkflowError as err:
        cause = err.cause
        if not isinstance(cause, ApplicationError):
            raise
        return AnnounceResult(receipt_id=req.ref.receipt_id, status=cause.type)
    receipt = result.receipt
    return AnnounceResult(
        receipt_id=receipt.id if receipt is not None else req.ref.receipt_id,
        status=receipt.status.value if receipt is not None else None,
    )
