"""Policy decisions: one per evaluated execution, write-once."""

from __future__ import annotations

from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from store.db import table_of
from store.models import PolicyDecisionRow

_DECISIONS = table_of(PolicyDecisionRow)
# Every execution records one: built once, executed with fresh parameters only.
_INSERT_DECISION = (
    insert(_DECISIONS)
    .on_conflict_do_nothing(index_elements=[_DECISIONS.c.id])
    .returning(*_DECISIONS.c)
)


async def insert_policy_decision(
    session: AsyncSession,
    *,
    id: str,
    tenant_id: str,
    receipt_id: str,
    capability_id: str,
    idempotency_key: str,
    mode: str,
    decision: str,
    rule_hit: str,
    reason: str = "",
    is_synthetic: bool = False,
    policy_version: int = 0,
) -> PolicyDecisionRow:
    """Record a decision; a retried step with the same id gets the first one back."""
    inserted = await session.execute(
        _INSERT_DECISION,
        {
            "id": id,
            "tenant_id": tenant_id,
            "receipt_id": receipt_id,
            "capability_id": capability_id,
            "idempotency_key": idempotency_key,
            "mode": mode,
            "decision": decision,
            "rule_hit": rule_hit,
            "reason": reason,
            "is_synthetic": is_synthetic,
            "policy_version": policy_version,
        },
    )
    new = inserted.mappings().one_or_none()
    if new is not None:  # the first: its row came back with the insert
        return PolicyDecisionRow(**new)
    row = await session.get(PolicyDecisionRow, id)
    assert row is not None
    return row
