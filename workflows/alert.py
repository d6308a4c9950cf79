"""``AnnounceAlert``: sends one operations alert (a dead letter, an ``outcome_unknown``, a
connection needing re-auth) as a normal execution, ``ExecuteCapability`` as a child, like an
approval's announcement.

Started by the steps where the events are born (``activities.alerts.Alerter``) under an id
derived from the event; the child's idempotency key is the event's too
(``alert/<kind>/<event id>``), so a repeated hand-off, a retried step or a reset run sends
one alert per event.
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
    from schemas.alerts import AlertInput
    from schemas.names import (
        ANNOUNCE_ALERT_WORKFLOW,
        CAPABILITY_ATTRIBUTE,
        EXECUTE_WORKFLOW,
        IDEMPOTENCY_KEY_ATTRIBUTE,
        IDEMPOTENCY_KEY_ATTRIBUTE_LENGTH,
        PREPARE_ALERT,
        RECEIPT_ATTRIBUTE,
        TENANT_ATTRIBUTE,
    )
    from schemas.run import ExecuteResult
    from schemas.slack_approvals import AnnounceResult, AnnounceStart
    from workflows.fairness import tenant_priority


@workflow.defn(name=ANNOUNCE_ALERT_WORKFLOW)
class AnnounceAlert:
    @workflow.run
    async def run(self, inp: AlertInput) -> AnnounceResult:
        start: AnnounceStart = await workflow.execute_activity(
            PREPARE_ALERT,
            inp,
            result_type=AnnounceStart,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10), maximum_attempts=5),
            priority=tenant_priority(inp.tenant_id),
        )
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
