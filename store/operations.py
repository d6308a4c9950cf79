"""What needs a person, counted for the operators' gauges: open dead letters (by kind, with
the oldest's age), executions that ended ``outcome_unknown`` lately, approvals pending (and
those past their expiry), the oldest undelivered outbox row, connections that need
re-authorising, and probes whose latest run failed.

Read per tenant, inside that tenant's transaction (row-level security holds), by two
statements over indexed columns, whose cost does not grow with the tenant's traffic: an
``outcome_unknown`` is counted from its dead letter (every one makes one), not from the
receipts; a probe's latest run is looked for among the last two intervals' receipts. The
worker sums the tenants' counts (no tenant label: the gauges' cardinality stays bounded by
the kinds, never by tenants or ids).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from schemas.names import PROBE_SCHEDULE_PREFIX

# How far back ``outcome_unknown`` executions are counted.
RECENT_WINDOWS = {"1h": timedelta(hours=1), "24h": timedelta(hours=24)}

_DEAD_LETTERS = text(
    """
SELECT kind, count(*), min(created_at) FROM dead_letters
WHERE tenant_id = :tenant AND status = 'open' GROUP BY kind
"""
)

_SCALARS = text(
    f"""
SELECT
  (SELECT count(*) FROM dead_letters WHERE tenant_id = :tenant AND kind = 'execution'
     AND error_code = 'outcome_unknown' AND created_at >= :since_1h) AS unknown_1h,
  (SELECT count(*) FROM dead_letters WHERE tenant_id = :tenant AND kind = 'execution'
     AND error_code = 'outcome_unknown' AND created_at >= :since_24h) AS unknown_24h,
  (SELECT count(*) FROM approvals WHERE tenant_id = :tenant AND status = 'pending')
     AS approvals_pending,
  (SELECT min(requested_at) FROM approvals WHERE tenant_id = :tenant AND status = 'pending')
     AS approvals_oldest,
  (SELECT count(*) FROM approvals WHERE tenant_id = :tenant AND status = 'pending'
     AND expires_at < :now) AS approvals_overdue,
  (SELECT created_at FROM outbox WHERE tenant_id = :tenant AND status = 'pending'
     ORDER BY seq LIMIT 1) AS outbox_oldest,
  (SELECT count(*) FROM connections c WHERE c.tenant_id = :tenant AND c.revoked_at IS NULL
     AND c.needs_reauth_at IS NOT NULL) AS needs_reauth,
  (SELECT count(*) FROM probes p CROSS JOIN LATERAL (
       SELECT r.status FROM receipts r
       WHERE r.tenant_id = :tenant AND r.is_synthetic
         AND r."timestamp" >= :now - make_interval(secs => 2 * p.interval_seconds)
         AND r.idempotency_key LIKE 'probe:{PROBE_SCHEDULE_PREFIX}' || p.id || '-%'
       ORDER BY r."timestamp" DESC LIMIT 1) latest
     WHERE p.tenant_id = :tenant AND NOT p.paused AND latest.status <> 'success')
     AS probes_failing
"""
)


@dataclass
class OpenDeadLetters:
    count: int = 0
    oldest: datetime | None = None


@dataclass
class NeedsAPerson:
    """One tenant's counts, or every tenant's summed (``plus``)."""

    dead_letters: dict[str, OpenDeadLetters] = field(default_factory=dict)
    outcome_unknown: dict[str, int] = field(default_factory=dict)
    approvals_pending: int = 0
    approvals_oldest: datetime | None = None
    approvals_overdue: int = 0
    outbox_oldest: datetime | None = None
    connections_needs_reauth: int = 0
    probes_failing: int = 0

    def plus(self, other: NeedsAPerson) -> NeedsAPerson:
        letters = dict(self.dead_letters)
        for kind, theirs in other.dead_letters.items():
            mine = letters.get(kind, OpenDeadLetters())
            letters[kind] = OpenDeadLetters(
                mine.count + theirs.count, _min(mine.oldest, theirs.oldest)
            )
        unknown = dict(self.outcome_unknown)
        for window, n in other.outcome_unknown.items():
            unknown[window] = unknown.get(window, 0) + n
        return NeedsAPerson(
            dead_letters=letters,
            outcome_unknown=unknown,
            approvals_pending=self.approvals_pending + other.approvals_pending,
            approvals_oldest=_min(self.approvals_oldest, other.approvals_oldest),
            approvals_overdue=self.approvals_overdue + other.approvals_overdue,
            outbox_oldest=_min(self.outbox_oldest, other.outbox_oldest),
            connections_needs_reauth=self.connections_needs_reauth + other.connections_needs_reauth,
            probes_failing=self.probes_failing + other.probes_failing,
        )


def _min(a: datetime | None, b: datetime | None) -> datetime | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


async def needs_a_person(session: AsyncSession, tenant_id: str, now: datetime) -> NeedsAPerson:
    """The tenant's counts at ``now`` (in its own transaction: row-level security holds)."""
    letters = {
        kind: OpenDeadLetters(int(n), oldest)
        for kind, n, oldest in (await session.execute(_DEAD_LETTERS, {"tenant": tenant_id})).all()
    }
    row = (
        await session.execute(
            _SCALARS,
            {
                "tenant": tenant_id,
                "now": now,
                "since_1h": now - RECENT_WINDOWS["1h"],
                "since_24h": now - RECENT_WINDOWS["24h"],
            },
        )
    ).one()
    return NeedsAPerson(
        dead_letters=letters,
        outcome_unknown={"1h": int(row.unknown_1h), "24h": int(row.unknown_24h)},
        approvals_pending=int(row.approvals_pending),
        approvals_oldest=row.approvals_oldest,
        approvals_overdue=int(row.approvals_overdue),
        outbox_oldest=row.outbox_oldest,
        connections_needs_reauth=int(row.needs_reauth),
        probes_failing=int(row.probes_failing),
    )
