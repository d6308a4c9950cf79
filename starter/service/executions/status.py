"""Status: what became of an execution, for as long as its receipt or its run exists:
as Postgres knows it (``recorded``), else as Temporal does (``started``)."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncSession
from temporalio.client import Client
from temporalio.service import RPCError

from schemas.approvals import ApprovalRef
from schemas.execute import Envelope, EnvelopeStatus, envelope_for_receipt
from schemas.names import IDEMPOTENCY_KEY_ATTRIBUTE_LENGTH, RECEIPT_ATTRIBUTE, TENANT_ATTRIBUTE
from starter.runtime.availability import temporal_away
from starter.service import approvals as approvals_service
from starter.service.executions.start import KEY_ATTR
from store import idempotency, outputs, receipts
from store.keyrings.codec import OutputSealer


async def recorded(
    session: AsyncSession, sealer: OutputSealer, tenant_id: str, receipt_id: str, trace_id: str
) -> Envelope | None:
    """An execution as Postgres knows it: finished (its receipt, and its output while kept),
    or ``accepted`` while its run, which has claimed the key, goes on. None: Postgres knows
    nothing of it yet."""
    receipt = await receipts.get_receipt(session, tenant_id, receipt_id)
    if receipt is not None:
        kept = await outputs.find(session, sealer, tenant_id, receipt_id, datetime.now(UTC))
        return envelope_for_receipt(receipt, kept)
    claim = await idempotency.find_claim_by_receipt(session, tenant_id, receipt_id)
    if claim is None:
        return None
    envelope = _accepted(receipt_id, trace_id, claim.key, claim.workflow_id)
    approval = await approvals_service.pending_for(session, tenant_id, receipt_id)
    return envelope.model_copy(update={"approval": ApprovalRef.of(approval) if approval else None})


async def started(
    client: Client, tenant_id: str, receipt_id: str, trace_id: str
) -> Envelope | None:
    """The ``accepted`` envelope of a run no worker has picked up yet (no claim in
    Postgres): Temporal holds it, findable by its receipt id attribute (persist-first)."""
    query = f"{TENANT_ATTRIBUTE} = '{tenant_id}' AND {RECEIPT_ATTRIBUTE} = '{receipt_id}'"
    try:
        async for wf in client.list_workflows(query, limit=1):
            key = wf.typed_search_attributes.get(KEY_ATTR)
            # The attribute holds the key's first characters: only a shorter key is whole.
            whole = key is not None and len(key) < IDEMPOTENCY_KEY_ATTRIBUTE_LENGTH
            return _accepted(receipt_id, trace_id, key if whole else None, wf.id)
    except RPCError as err:
        if temporal_away(err):
            raise  # unavailable, not a not-found that is not known to be true
        return None
    return None


def _accepted(receipt_id: str, trace_id: str, key: str | None, workflow_id: str) -> Envelope:
    return Envelope(
        receipt_id=receipt_id,
        trace_id=trace_id,
        status=EnvelopeStatus.ACCEPTED,
        idempotency_key=key,
        workflow_id=workflow_id,
    )
