"""Dead letters: list, show, requeue, resolve; and compensating-action records.

A delivery is requeued as it was (attempts reset, same ``webhook-id``). An execution is
requeued only on an operator's explicit statement that its effect did not happen: then a
new execution starts under a new idempotency key (so a new downstream key), linked to the
original by the requeue event. The new execution acts for the key that requeued it (its
id and scopes are signed into the start), never for the original caller's: the requeuer
must hold what executing the capability needs, and when the run waits for an approval, the
requeuer is its requester (so cannot approve it). Every requeue and resolve is an event in
the log, with the operator's API key id as its actor."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from schemas.errors import ErrorCode
from schemas.events import AggregateType, EventDraft, EventType, event_id
from schemas.pages import Key
from schemas.records import Receipt
from schemas.webhooks import (
    CompensatingAction,
    DeadLetter,
    DeadLetterKind,
    DeadLetterStatus,
    RequeueRequest,
    compensating_action_id,
)
from starter.service import prefixes
from starter.service.errors import MoatError
from store import dead_letters, outbox, receipts
from store import events as event_log
from store.models import DeadLetterRow

_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")

# Starts a new execution like the dead-lettered one, under a new key, for the requeuing key
# (its scopes, its id); returns the new receipt id.
Restart = Callable[[Receipt, str, Sequence[str], str], Awaitable[str]]


def _not_found(dl_id: str) -> MoatError:
    return MoatError(ErrorCode.DEAD_LETTER_NOT_FOUND, f"No dead letter {dl_id[:80]!r}.")


async def list_open(
    session: AsyncSession,
    tenant_id: str,
    status: DeadLetterStatus | None,
    limit: int,
    after: Key | None = None,
) -> list[DeadLetter]:
    rows = await dead_letters.list_dead_letters(session, tenant_id, status, limit, after)
    return [dead_letters.to_dead_letter(r) for r in rows]


async def show(session: AsyncSession, tenant_id: str, dl_id: str) -> DeadLetter:
    row = await _get(session, tenant_id, dl_id, lock=False)
    return dead_letters.to_dead_letter(row)


async def _get(session: AsyncSession, tenant_id: str, dl_id: str, *, lock: bool) -> DeadLetterRow:
    if not _ID.match(dl_id):
        whole = await prefixes.unique_id(session, DeadLetterRow, tenant_id, dl_id, "dead letter")
        dl_id = whole or dl_id
    row = await dead_letters.get(session, tenant_id, dl_id, lock=lock) if _ID.match(dl_id) else None
    if row is None:
        raise _not_found(dl_id)
    return row


def _open(row: DeadLetterRow) -> None:
    if row.status != DeadLetterStatus.OPEN.value:
        raise MoatError(
            ErrorCode.DEAD_LETTER_CLOSED,
            f"Dead letter {row.id} is already {row.status}; nothing to do.",
            {"status": row.status, "requeued_as": row.requeued_as},
        )


async def requeue(
    session: AsyncSession,
    tenant_id: str,
    dl_id: str,
    body: RequeueRequest,
    *,
    key_id: str,
    restart: Restart | None,
    scopes: Sequence[str] = (),
) -> DeadLetter:
    """``key_id`` and ``scopes``: the requeuing key's; a requeued execution runs for it."""
    row = await _get(session, tenant_id, dl_id, lock=True)
    _open(row)
    now = datetime.now(UTC)
    if row.kind == DeadLetterKind.DELIVERY.value:
        item = await outbox.lock(session, tenant_id, row.subject_id)
        if item is None:
            raise MoatError(
                ErrorCode.DEAD_LETTER_CLOSED,
                "The delivery's subscription was removed; resolve this dead letter instead.",
            )
        await outbox.requeue(session, item)
        requeued_as = f"{item.id}#{item.generation}"
    else:
        if not body.effect_did_not_happen:
            raise MoatError(
                ErrorCode.EFFECT_STATEMENT_REQUIRED,
                "Requeueing an execution starts its effect again. Check with the provider "
                'that it did not happen, then send {"effect_did_not_happen": true}; '
                "otherwise resolve the dead letter with a note.",
            )
        receipt = await receipts.get_receipt(session, tenant_id, row.subject_id)
        if receipt is None or restart is None:
            raise MoatError(
                ErrorCode.DEAD_LETTER_CLOSED, "This execution cannot be started again here."
            )
        new_key = f"{receipt.idempotency_key}#requeue-{row.id[:8]}"
        requeued_as = await restart(receipt, new_key, scopes, key_id)
        await _note(
            session,
            tenant_id,
            row.subject_id,
            key_id,
            "requeue",
            body.note,
            now,
            effect="did_not_happen",
            requeued_as=requeued_as,
        )
    await dead_letters.close(
        session,
        row,
        DeadLetterStatus.REQUEUED,
        by=key_id,
        note=body.note,
        now=now,
        requeued_as=requeued_as,
    )
    await _event(session, row, EventType.DEAD_LETTER_REQUEUED, key_id, requeued_as=requeued_as)
    return dead_letters.to_dead_letter(row)


async def resolve(
    session: AsyncSession, tenant_id: str, dl_id: str, note: str, *, key_id: str
) -> DeadLetter:
    row = await _get(session, tenant_id, dl_id, lock=True)
    _open(row)
    now = datetime.now(UTC)
    if row.kind == DeadLetterKind.EXECUTION.value:
        await _note(session, tenant_id, row.subject_id, key_id, "resolve", note, now)
    await dead_letters.close(session, row, DeadLetterStatus.RESOLVED, by=key_id, note=note, now=now)
    await _event(session, row, EventType.DEAD_LETTER_RESOLVED, key_id, note=note)
    return dead_letters.to_dead_letter(row)


async def _note(
    session: AsyncSession,
    tenant_id: str,
    receipt_id: str,
    key_id: str,
    action: str,
    note: str,
    now: datetime,
    *,
    effect: str | None = None,
    **extra: Any,
) -> None:
    ca = await dead_letters.get_compensating_action(
        session, tenant_id, compensating_action_id(receipt_id), lock=True
    )
    if ca is not None:
        entry = {"action": action, "by": key_id, "at": now.isoformat(), "note": note, **extra}
        await dead_letters.note_operator_action(session, ca, entry, now, effect=effect)


async def _event(
    session: AsyncSession, row: DeadLetterRow, kind: EventType, key_id: str, **data: Any
) -> None:
    """In the subject's own chain (the execution's, or the delivery's), caused by its last
    event."""
    correlation = row.subject_id
    name = f"{kind.value}:{row.id}:{row.closed_at.isoformat() if row.closed_at else ''}"
    await event_log.append(
        session,
        [
            EventDraft(
                id=event_id(correlation, row.id, name),
                tenant_id=row.tenant_id,
                event_type=kind,
                aggregate_type=AggregateType.DEAD_LETTER,
                aggregate_id=row.id,
                event_data={"kind": row.kind, **data},
                correlation_id=correlation,
                actor=f"api_key:{key_id}",
            )
        ],
        first_cause_from_log=True,
    )


async def compensating_action(
    session: AsyncSession, tenant_id: str, ca_id: str
) -> CompensatingAction:
    row = (
        await dead_letters.get_compensating_action(session, tenant_id, ca_id)
        if _ID.match(ca_id)
        else None
    )
    if row is None:
        raise MoatError(
            ErrorCode.COMPENSATING_ACTION_NOT_FOUND, f"No compensating action {ca_id[:80]!r}."
        )
    return dead_letters.to_compensating_action(row)
