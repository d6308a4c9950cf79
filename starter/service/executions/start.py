"""Start: the run of an execution started in Temporal, or the one already running for its
key attached to (``launch``, ``start``); and an execution started again under a new key
(``restart``).

Persist-first: the only durable write for a new request is starting the workflow. The
workflow id is the tenant's and the key's, so every copy of a request, on any gateway,
reaches the same run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from temporalio.client import Client
from temporalio.common import (
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)

from schemas.identity import ExecutionRef
from schemas.ids import uuid7
from schemas.names import (
    CAPABILITY_ATTRIBUTE,
    EXECUTE_WORKFLOW,
    IDEMPOTENCY_KEY_ATTRIBUTE,
    IDEMPOTENCY_KEY_ATTRIBUTE_LENGTH,
    RECEIPT_ATTRIBUTE,
    TENANT_ATTRIBUTE,
)
from schemas.records import Receipt
from schemas.run import ExecuteResult, ExecuteWorkflowInput, workflow_id_for
from schemas.scopes import capability_scopes
from schemas.settings import MoatSettings
from starter.service.executions.call import Call, Unfinished
from starter.service.executions.ingest import Prepared
from starter.service.scopes import require_scope
from store.api_keys import AuthenticatedTenant
from store.keyrings.start import StartKeyring
from workflows.fairness import tenant_priority

TENANT_ATTR = SearchAttributeKey.for_keyword(TENANT_ATTRIBUTE)
CAPABILITY_ATTR = SearchAttributeKey.for_keyword(CAPABILITY_ATTRIBUTE)
KEY_ATTR = SearchAttributeKey.for_keyword(IDEMPOTENCY_KEY_ATTRIBUTE)
RECEIPT_ATTR = SearchAttributeKey.for_keyword(RECEIPT_ATTRIBUTE)


@dataclass(frozen=True)
class Launch:
    """A run about to start: the receipt and request it answers, and its signed input."""

    receipt_id: str
    request_id: str
    workflow_id: str
    arg: ExecuteWorkflowInput


def launch(
    settings: MoatSettings,
    start_keys: StartKeyring,
    tenant: AuthenticatedTenant,
    prepared: Prepared,
    call: Call,
    unfinished: Unfinished | None,
) -> Launch:
    """The run for ``call``: an unfinished execution keeps its receipt id; the caller's
    key's scopes go with it (the run's policy step checks them against the capability's)."""
    receipt_id = unfinished.receipt_id if unfinished else str(uuid7())
    request_id = str(uuid7())
    req = prepared.request
    workflow_id = workflow_id_for(tenant.tenant_id, prepared.idempotency_key)
    if req.dry_run:
        # A dry run never takes the key: its own run, beside the real one's id.
        workflow_id = f"{workflow_id}/dry/{receipt_id}"
    ref = ExecutionRef(
        receipt_id=receipt_id,
        tenant_id=tenant.tenant_id,
        idempotency_key=prepared.idempotency_key,
        input_hash=prepared.input_hash,
        connection_id=req.connection_id,
    )
    arg = ExecuteWorkflowInput(
        ref=ref,
        capability=prepared.capability,
        input=req.input,
        request_id=request_id,
        trace_id=call.trace_id,
        submitted_at=call.submitted_at,
        idempotency_ttl_seconds=tenant.idempotency_ttl_seconds,
        local_activities=settings.local_activities,
        dry_run=req.dry_run,
        scopes=list(tenant.scopes),
        api_key_id=tenant.key_id,
    )
    return Launch(receipt_id, request_id, workflow_id, start_keys.signed(arg, workflow_id))


async def start(
    client: Client,
    settings: MoatSettings,
    run: Launch,
    prepared: Prepared,
    reuse: WorkflowIDReusePolicy,
) -> Any:
    """The run's handle: started, or the one running under its workflow id (``reuse``
    says whether a closed run's id may be taken again)."""
    tenant_id = run.arg.ref.tenant_id
    return await client.start_workflow(
        EXECUTE_WORKFLOW,
        run.arg,
        id=run.workflow_id,
        task_queue=settings.task_queue,
        id_reuse_policy=reuse,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        result_type=ExecuteResult,
        priority=tenant_priority(tenant_id, settings.fairness_weight_of(tenant_id)),
        # The run's line in the Web UI's list; the run keeps its details current.
        static_summary=f"{prepared.capability.id}@{prepared.capability.version} "
        f"· receipt {run.receipt_id}",
        memo={
            "receipt_id": run.receipt_id,
            "input_hash": prepared.input_hash,
            "request_id": run.request_id,
        },
        search_attributes=_attributes(
            tenant_id, prepared.capability.id, prepared.idempotency_key, run.receipt_id
        ),
    )


async def restart(
    client: Client,
    settings: MoatSettings,
    start_keys: StartKeyring,
    receipt: Receipt,
    new_key: str,
    scopes: Sequence[str],
    api_key_id: str,
) -> str:
    """Start the execution of ``receipt`` again under ``new_key`` (``Executions.restart``);
    returns the new receipt id."""
    handle = client.get_workflow_handle(receipt.workflow_id, run_id=receipt.run_id)
    history = await handle.fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    [original] = await client.data_converter.decode(started.input.payloads, [ExecuteWorkflowInput])
    assert isinstance(original, ExecuteWorkflowInput)
    cap = original.capability
    require_scope(scopes, *capability_scopes(cap.id, cap.required_scopes))
    receipt_id = str(uuid7())
    workflow_id = workflow_id_for(receipt.tenant_id, new_key)
    ref = original.ref.model_copy(update={"receipt_id": receipt_id, "idempotency_key": new_key})
    arg = original.model_copy(
        update={
            "ref": ref,
            "request_id": str(uuid7()),
            "submitted_at": datetime.now(UTC),
            "scopes": list(scopes),
            "api_key_id": api_key_id,
        }
    )
    await client.start_workflow(
        EXECUTE_WORKFLOW,
        start_keys.signed(arg, workflow_id),
        id=workflow_id,
        task_queue=settings.task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        priority=tenant_priority(receipt.tenant_id, settings.fairness_weight_of(receipt.tenant_id)),
        static_summary=f"{cap.id}@{cap.version} · receipt {receipt_id} · requeue of {receipt.id}",
        memo={"receipt_id": receipt_id, "requeue_of": receipt.id},
        search_attributes=_attributes(
            receipt.tenant_id, original.capability.id, new_key, receipt_id
        ),
    )
    return receipt_id


def _attributes(
    tenant_id: str, capability_id: str, key: str, receipt_id: str
) -> TypedSearchAttributes:
    """What a run is found by: its tenant, capability, key (its first characters) and
    receipt id."""
    return TypedSearchAttributes(
        [
            SearchAttributePair(TENANT_ATTR, tenant_id),
            SearchAttributePair(CAPABILITY_ATTR, capability_id),
            SearchAttributePair(KEY_ATTR, key[:IDEMPOTENCY_KEY_ATTRIBUTE_LENGTH]),
            SearchAttributePair(RECEIPT_ATTR, receipt_id),
        ]
    )
