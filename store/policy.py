"""Policy decisions: one per evaluated execution, write-once."""

from __future__ import annotations

from datetime import datetime
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


# What a policy check decided ahead of its reads expects of them, as driver SQL for the
# transaction that sends those reads and its decision together (``expected_params``): sent
# after the reads (the key's claim and the budget's lock among them) and before what it
# writes, it fails with the SQLSTATE ``UNEXPECTED`` (a square root of -1) unless the tenant
# still has the mode, bypass and hosts the check expected, its current document is the
# version expected (documents are write-once, so the number names the rules), the key was
# claimed by this very statement's execution just now (its first sighting is the check's
# own time), no receipt is recorded for it, and the capability's budget is the one
# expected (its limit and period) or, expected none, still has none. Nothing after it runs
# then, the COMMIT included.
UNEXPECTED = "2201F"
EXPECTED = (
    "SELECT sqrt(CASE WHEN"
    " EXISTS (SELECT FROM tenants t WHERE t.id = %(tenant_id)s"
    " AND t.policy_mode = %(policy_mode)s AND t.allow_bypass = %(allow_bypass)s"
    " AND t.http_allow_hosts = %(http_allow_hosts)s::text[])"
    " AND coalesce((SELECT max(p.version) FROM policy_versions p"
    " WHERE p.tenant_id = %(tenant_id)s), 0) = %(policy_version)s"
    " AND EXISTS (SELECT FROM idempotency_keys k WHERE k.tenant_id = %(tenant_id)s"
    " AND k.idempotency_key = %(idempotency_key)s AND k.receipt_id = %(receipt_id)s"
    " AND k.first_seen_at = %(now)s)"
    " AND NOT EXISTS (SELECT FROM receipts r WHERE r.tenant_id = %(tenant_id)s"
    " AND r.id = %(receipt_id)s)"
    " AND CASE WHEN %(budgeted)s THEN EXISTS (SELECT FROM budgets b"
    " WHERE b.tenant_id = %(tenant_id)s AND b.capability_id = %(capability_id)s"
    ' AND b."limit" = %(limit)s::int AND b.period = %(period)s::text)'
    " ELSE NOT EXISTS (SELECT FROM budgets b WHERE b.tenant_id = %(tenant_id)s"
    " AND b.capability_id = %(capability_id)s) END"
    " THEN 1 ELSE -1 END)"
)


def expected_params(
    *,
    tenant_id: str,
    policy_mode: str,
    allow_bypass: bool,
    http_allow_hosts: list[str],
    policy_version: int,
    idempotency_key: str,
    receipt_id: str,
    now: datetime,
    capability_id: str,
    budget: tuple[int, str] | None,
) -> dict[str, Any]:
    """``EXPECTED``'s parameters: ``budget`` the limit and period expected (None: none)."""
    limit, period = budget if budget is not None else (None, None)
    return {
        "tenant_id": tenant_id,
        "policy_mode": policy_mode,
        "allow_bypass": allow_bypass,
        "http_allow_hosts": list(http_allow_hosts),
        "policy_version": policy_version,
        "idempotency_key": idempotency_key,
        "receipt_id": receipt_id,
        "now": now,
        "capability_id": capability_id,
        "budgeted": budget is not None,
        "limit": limit,
        "period": period,
    }
