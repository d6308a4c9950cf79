"""Policy decisions: one per evaluated execution, write-once."""

from __future__ import annotations

from typing import Any

from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from store import db, event_writes, tenancy
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


# ``insert_policy_decision``'s insert as driver SQL (``store.db.pipelined_rows``), its
# parameters the same, for a check that sends the statements after it before it answers:
# a decision already recorded (a retried check) fails it, with the SQLSTATE
# ``ALREADY_DECIDED`` (a division by zero), so that nothing after it runs. It is
# ``event_writes.PARTIAL``: ``events.committed`` raises ``PartialAppend`` for either.
ALREADY_DECIDED = event_writes.PARTIAL
_VALUES = (
    "id",
    "tenant_id",
    "receipt_id",
    "capability_id",
    "idempotency_key",
    "mode",
    "decision",
    "rule_hit",
    "reason",
    "is_synthetic",
    "policy_version",
)
# The decision's insert, skipped when the execution has one (its id is fixed).
_INSERT = (
    "INSERT INTO policy_decisions ("
    + ", ".join(_VALUES)
    + ") VALUES ("
    + ", ".join(f"%({c})s" for c in _VALUES)
    + ") ON CONFLICT (id) DO NOTHING"
)
INSERT_NEW_DECISION = (
    f"WITH d AS ({_INSERT} RETURNING id)"
    " SELECT d.id, 1 / (SELECT count(*) FROM d) AS inserted FROM (SELECT 1) one"
    " LEFT JOIN d ON true"
)

# ``insert_policy_decision`` in one statement: the decision inserted, else the one recorded
# first (none when a concurrent check recorded it after the statement's snapshot).
_INSERT_OR_FIRST = (
    f"WITH d AS ({_INSERT} RETURNING *)"
    " SELECT * FROM d UNION ALL SELECT * FROM policy_decisions"
    " WHERE id = %(id)s AND NOT EXISTS (SELECT FROM d)"
)


async def insert_policy_decision_committing(
    session: AsyncSession, values: dict[str, Any]
) -> PolicyDecisionRow:
    """``insert_policy_decision`` (``values``: its parameters) as the transaction's last
    statement, sent with its COMMIT in one round trip. The decision a concurrent check
    recorded first, after the statement's snapshot, is read once committed, in a
    transaction of its own (its tenant named first)."""
    sent = [(_INSERT_OR_FIRST, values)]
    columns, rows = (await db.pipelined_rows(session, sent, commit=True))[0]
    if rows:
        return PolicyDecisionRow(**dict(zip(columns, rows[0], strict=True)))
    await tenancy.set_tenant(session, values["tenant_id"])
    row = await session.get(PolicyDecisionRow, values["id"])
    assert row is not None
    return row


# The lock ``budgets.budget_state`` takes on a capability's budget, as driver SQL
# (``store.db.pipelined``) for the policy check's first round trip: a row, its limit and
# period, when the capability has a budget.
BUDGET_LOCK = (
    'SELECT "limit", period FROM budgets WHERE tenant_id = %(tenant_id)s'
    " AND capability_id = %(capability_id)s FOR UPDATE"
)
