"""``ExecuteCapability``: policy check → adapter call → record outcome → receipt.

Deterministic orchestration only. Activities are named, not imported; every input they
need was resolved at ingest and travels in ``ExecuteWorkflowInput``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import ActivityError, ApplicationError, RetryState, TimeoutError

with workflow.unsafe.imports_passed_through():
    from schemas.records import Decision, ErrorTaxonomy, ExecutionStatus, Receipt, RuleHit
    from schemas.run import (
        WORKFLOW_NAME,
        AdapterInput,
        AdapterOutput,
        ExecuteResult,
        ExecuteWorkflowInput,
        PolicyInput,
        PolicyOutcome,
        RecordInput,
        downstream_idempotency_key,
    )

CHECK_POLICY = "moat.check_policy"
CALL_ADAPTER = "moat.call_adapter"
RECORD_OUTCOME = "moat.record_outcome"

STATUS_ATTR = SearchAttributeKey.for_keyword("MoatStatus")

# Bookkeeping steps talk to our own Postgres: retry quickly and for a while.
BOOKKEEPING_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=5),
)
BOOKKEEPING_TIMEOUT = timedelta(seconds=15)
BOOKKEEPING_DEADLINE = timedelta(minutes=10)


@workflow.defn(name=WORKFLOW_NAME)
class ExecuteCapability:
    @workflow.run
    async def run(self, req: ExecuteWorkflowInput) -> ExecuteResult:
        info = workflow.info()
        policy: PolicyOutcome = await self._bookkeeping(
            CHECK_POLICY,
            PolicyInput(
                receipt_id=req.receipt_id,
                tenant_id=req.tenant_id,
                idempotency_key=req.idempotency_key,
                input_hash=req.input_hash,
                capability=req.capability,
                workflow_id=info.workflow_id,
                run_id=info.run_id,
                idempotency_ttl_seconds=req.idempotency_ttl_seconds,
                is_synthetic=req.is_synthetic,
                dry_run=req.dry_run,
            ),
            PolicyOutcome,
            req.local_activities,
        )
        if req.dry_run:
            return ExecuteResult(plan=policy)
        if policy.existing_receipt is not None:
            self._set_status(policy.existing_receipt)
            return ExecuteResult(receipt=policy.existing_receipt, replayed=True)

        record = RecordInput(
            receipt_id=req.receipt_id,
            tenant_id=req.tenant_id,
            idempotency_key=req.idempotency_key,
            input_hash=req.input_hash,
            capability=req.capability,
            connection_id=req.connection_id,
            request_id=req.request_id,
            trace_id=req.trace_id,
            submitted_at=req.submitted_at,
            workflow_id=info.workflow_id,
            run_id=info.run_id,
            policy_decision_id=policy.policy_decision_id,
            is_synthetic=req.is_synthetic,
            success=False,
            status=ExecutionStatus.POLICY_DENIED,
        )
        if policy.decision == Decision.DENY:
            code = (
                "budget_exceeded"
                if policy.rule_hit == RuleHit.BUDGET_EXCEEDED
                else ("policy_denied")
            )
            record = record.model_copy(
                update={"error_code": code, "taxonomy": ErrorTaxonomy.POLICY_DENIED}
            )
        else:
            record = await self._call_adapter(req, record)

        receipt: Receipt = await self._bookkeeping(
            RECORD_OUTCOME, record, Receipt, req.local_activities
        )
        self._set_status(receipt)
        return ExecuteResult(receipt=receipt)

    async def _call_adapter(self, req: ExecuteWorkflowInput, record: RecordInput) -> RecordInput:
        cap = req.capability
        retry = cap.retry_settings
        key = downstream_idempotency_key(workflow.info().workflow_id, req.receipt_id, "adapter")
        try:
            out: AdapterOutput = await workflow.execute_activity(
                CALL_ADAPTER,
                AdapterInput(
                    tenant_id=req.tenant_id,
                    receipt_id=req.receipt_id,
                    capability=cap,
                    input=req.input,
                    connection_id=req.connection_id,
                    idempotency_key=key,
                    trace_id=req.trace_id,
                ),
                result_type=AdapterOutput,
                # The adapter's own HTTP timeout is the capability's; leave it room to report.
                start_to_close_timeout=timedelta(seconds=cap.timeout_seconds + 5),
                retry_policy=RetryPolicy(
                    initial_interval=timedelta(seconds=retry.base_delay_seconds),
                    backoff_coefficient=2.0,
                    maximum_interval=timedelta(seconds=retry.max_delay_seconds),
                    maximum_attempts=retry.max_retries + 1,
                ),
            )
        except ActivityError as err:
            taxonomy, http_status = _classify(err.cause)
            status = (
                ExecutionStatus.TIMEOUT
                if taxonomy == ErrorTaxonomy.TIMEOUT
                else ExecutionStatus.FAILURE
            )
            error_code = taxonomy.value
            exhausted = err.retry_state == RetryState.MAXIMUM_ATTEMPTS_REACHED
            if isinstance(err.cause, ApplicationError) and err.cause.type == "host_not_allowed":
                error_code = "host_not_allowed"
            return record.model_copy(
                update={
                    "status": status,
                    "taxonomy": taxonomy,
                    "http_status": http_status,
                    "error_code": error_code,
                    "adapter_called": True,
                    "retry_exhausted": exhausted,
                }
            )
        return record.model_copy(
            update={
                "success": True,
                "status": ExecutionStatus.SUCCESS,
                "taxonomy": ErrorTaxonomy.NONE,
                "http_status": out.http_status,
                "output_hash": out.output_hash,
                "adapter_called": True,
            }
        )

    async def _bookkeeping(self, name: str, arg: Any, result_type: type[Any], local: bool) -> Any:
        if local:
            return await workflow.execute_local_activity(
                name,
                arg,
                result_type=result_type,
                start_to_close_timeout=BOOKKEEPING_TIMEOUT,
                schedule_to_close_timeout=BOOKKEEPING_DEADLINE,
                retry_policy=BOOKKEEPING_RETRY,
            )
        return await workflow.execute_activity(
            name,
            arg,
            result_type=result_type,
            start_to_close_timeout=BOOKKEEPING_TIMEOUT,
            schedule_to_close_timeout=BOOKKEEPING_DEADLINE,
            retry_policy=BOOKKEEPING_RETRY,
        )

    def _set_status(self, receipt: Receipt) -> None:
        workflow.upsert_search_attributes([STATUS_ATTR.value_set(receipt.status.value)])


def _classify(cause: BaseException | None) -> tuple[ErrorTaxonomy, int | None]:
    """Taxonomy and provider status of the adapter's final failure."""
    if isinstance(cause, TimeoutError):
        return ErrorTaxonomy.TIMEOUT, None
    if isinstance(cause, ApplicationError):
        details = cause.details[0] if cause.details else {}
        http_status = details.get("http_status") if isinstance(details, dict) else None
        try:
            taxonomy = ErrorTaxonomy(cause.type or "unknown")
        except ValueError:
            taxonomy = (
                ErrorTaxonomy.GATEWAY_ERROR
                if cause.type == "host_not_allowed"
                else ErrorTaxonomy.UNKNOWN
            )
        return taxonomy, http_status
    return ErrorTaxonomy.GATEWAY_ERROR, None
