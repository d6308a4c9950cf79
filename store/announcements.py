"""What the event log tells tenants: an execution's outcome events become outbox rows for
its tenant's webhooks, and an effect that dead-lettered becomes a dead letter with its
compensating-action record, all in the transaction that writes the events.

Keyed on the events themselves, so any step that records an outcome or dead-letters an
effect (retries exhausted, an outcome that stays unknown) is announced the same way."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy.ext.asyncio import AsyncSession

from schemas.events import Event, EventDraft, EventType
from schemas.webhooks import WebhookEventType, compensating_action_id, execution_dead_letter_id
from store import approvals, dead_letters, outbox, receipts

# By tenant: the event types its active webhook subscriptions take.
Subscribed = Mapping[str, frozenset[str]]
_OUTCOMES = {
    EventType.RUN_COMPLETED: WebhookEventType.EXECUTION_COMPLETED,
    EventType.RUN_FAILED: WebhookEventType.EXECUTION_FAILED,
    EventType.EFFECT_DEAD_LETTERED: WebhookEventType.EXECUTION_DEAD_LETTERED,
}
_APPROVALS = {
    EventType.APPROVAL_REQUESTED: WebhookEventType.APPROVAL_REQUESTED,
    EventType.APPROVAL_GRANTED: WebhookEventType.APPROVAL_DECIDED,
    EventType.APPROVAL_REJECTED: WebhookEventType.APPROVAL_DECIDED,
    EventType.APPROVAL_EXPIRED: WebhookEventType.APPROVAL_DECIDED,
}


def quiet(events: Sequence[EventDraft], subscribed: Subscribed) -> bool:
    """Whether ``announce`` would write nothing for these events, by what the tenants'
    webhooks take (``subscribed``; a tenant missing from it is not known to be quiet): no
    dead letter among them, and nothing any subscription takes."""
    for event in events:
        kind = _APPROVALS.get(event.event_type) or _OUTCOMES.get(event.event_type)
        if kind is None:
            continue
        if kind == WebhookEventType.EXECUTION_DEAD_LETTERED:
            return False
        wanted = subscribed.get(event.tenant_id)
        if wanted is None or kind.value in wanted:
            return False
    return True


async def announce(
    session: AsyncSession, written: Sequence[Event], subscribed: Subscribed | None = None
) -> None:
    """Outbox rows (and dead letters) for the events just written, in their order.
    ``subscribed``: what the tenants' webhooks take, as far as this transaction read it
    already (``outbox.subscribed``); the rest is read when needed."""
    wanted: dict[str, frozenset[str]] = dict(subscribed or {})
    for event in written:
        kind = _APPROVALS.get(event.event_type) or _OUTCOMES.get(event.event_type)
        if kind is None:
            continue
        # Most tenants subscribe to nothing: read nothing more for an announcement nobody
        # takes. A dead letter is recorded whether or not anyone subscribes.
        if event.tenant_id not in wanted:
            wanted[event.tenant_id] = await outbox.subscribed(session, event.tenant_id)
        heard = kind.value in wanted[event.tenant_id]
        if event.event_type in _APPROVALS:
            if heard:
                await _announce_approval(session, event)
            continue
        if not heard and kind != WebhookEventType.EXECUTION_DEAD_LETTERED:
            continue
        receipt = await receipts.get_receipt(session, event.tenant_id, event.correlation_id)
        if receipt is None:  # e.g. a refused start: there is no execution to speak of
            continue
        data = receipt.model_dump(mode="json")
        if kind == WebhookEventType.EXECUTION_DEAD_LETTERED:
            error_code = event.event_data.get("error_code")
            await dead_letters.record_execution(
                session,
                tenant_id=event.tenant_id,
                receipt_id=receipt.id,
                reason=str(event.event_data.get("reason") or "the effect's retries ran out"),
                error_code=str(error_code) if error_code is not None else None,
                attempted={
                    "capability_id": receipt.capability_id,
                    "capability_version": receipt.capability_version,
                    "adapter_id": receipt.adapter_id,
                    "idempotency_key": receipt.idempotency_key,
                    "input_hash": receipt.input_hash,
                    "workflow_id": receipt.workflow_id,
                    "run_id": receipt.run_id,
                    "error_code": receipt.error_code,
                    "http_status": receipt.http_status,
                    **{k: v for k, v in event.event_data.items() if k != "reason"},
                },
            )
            data["dead_letter_id"] = execution_dead_letter_id(receipt.id)
            data["compensating_action_id"] = compensating_action_id(receipt.id)
        if receipt.is_synthetic:
            continue  # a probe's run: kept out of tenants' webhooks like out of their numbers
        await outbox.enqueue(
            session,
            tenant_id=event.tenant_id,
            event_type=kind,
            aggregate_id=receipt.id,
            data=data,
            event_id=event.id,
            occurred_at=event.occurred_at,
        )


async def _announce_approval(session: AsyncSession, event: Event) -> None:
    """``approval.requested`` / ``approval.decided`` with the approval as the API answers it,
    without the call's input (hashes, not input, leave Moat). Keyed on the execution's
    receipt id, so an approval's events stay in order with the execution's outcome."""
    row = await approvals.get(session, event.tenant_id, event.aggregate_id)
    if row is None:
        return
    await outbox.enqueue(
        session,
        tenant_id=event.tenant_id,
        event_type=_APPROVALS[event.event_type],
        aggregate_id=row.receipt_id,
        data=approvals.to_approval(row).model_dump(mode="json", exclude={"input"}),
        event_id=event.id,
        occurred_at=event.occurred_at,
    )
