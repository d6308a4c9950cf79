"""``RunProbe``: started by a probe's Temporal Schedule; runs the probed capability through
the normal path, ``ExecuteCapability`` as a child, marked synthetic.

The idempotency key is the scheduled run's workflow id (the schedule appends the time it
fires), so a probe run that is retried or reset never executes twice, and every firing
executes once.

A probe's schedule starts it on the delivery queue, and the child execution runs on its
parent's queue, so the probed provider is called with the delivery worker's slots and HTTP
pool: a slow or hanging provider under probe never holds what tenants' executions need.
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
        CAPABILITY_ATTRIBUTE,
        EXECUTE_WORKFLOW,
        IDEMPOTENCY_KEY_ATTRIBUTE,
        IDEMPOTENCY_KEY_ATTRIBUTE_LENGTH,
        PREPARE_PROBE,
        PROBE_WORKFLOW,
        RECEIPT_ATTRIBUTE,
        TENANT_ATTRIBUTE,
    )
    from schemas.probes import ProbeRunInput, ProbeRunResult, ProbeStart, ProbeStartInput
    from schemas.run import ExecuteResult
    from workflows.fairness import tenant_priority


@workflow.defn(name=PROBE_WORKFLOW)
class RunProbe:
    @workflow.run
    async def run(self, inp: ProbeRunInput) -> ProbeRunResult:
        key = f"probe:{workflow.info().workflow_id}"
        start: ProbeStart = await workflow.execute_activity(
            PREPARE_PROBE,
            ProbeStartInput(tenant_id=inp.tenant_id, probe_id=inp.probe_id, idempotency_key=key),
            result_type=ProbeStart,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10), maximum_attempts=5),
            priority=tenant_priority(inp.tenant_id),
        )
        if start.request is None or start.workflow_id is None:
            return ProbeRunResult(skipped=start.skipped)
        req = start.request
        attributes = TypedSearchAttributes(
            [
                SearchAttributePair(SearchAttributeKey.for_keyword(name), value)
                for name, value in (
                    (TENANT_ATTRIBUTE, req.ref.tenant_id),
                    (CAPABILITY_ATTRIBUTE, req.capability.id),
                    (IDEMPOTENCY_KEY_ATTRIBUTE, key[:IDEMPOTENCY_KEY_ATTRIBUTE_LENGTH]),
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
            # An execution that failed ends its run failed, its receipt in the failure.
            failed = _failed_answer(err)
            if failed is None:
                raise
            result = failed
        receipt = result.receipt
        return ProbeRunResult(
            receipt_id=receipt.id if receipt is not None else req.ref.receipt_id,
            status=receipt.status.value if receipt is not None else None,
        )


def _failed_answer(err: ChildWorkflowError) -> ExecuteResult | None:
    """The answer a child execution that failed carries; None when it failed inside Moat."""
    cause = err.cause
    if isinstance(cause, ApplicationError):
        return ExecuteResult.of_failure(cause.type, cause.details)
    return None
