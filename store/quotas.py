"""Per-tenant quotas: the admins' own limits (``tenant_quotas``), what each quota counts,
and the lock that makes a count and the insert it allows one step.

A create path takes the quota's lock, counts, and inserts in one transaction: the lock is
transaction-scoped, so a second create of the same tenant and quota waits until the first
commits (or rolls back) and then counts its row. Different tenants and quotas never wait
for each other.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete, func, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from schemas.quotas import Quota
from store.models import (
    ConnectionRow,
    PolicyVersionRow,
    ProbeRow,
    TenantQuotaRow,
    WebhookSubscription,
)

# A call the policy step sends to wait for approval holds a slot from its decision on,
# before its approval row exists (the next step writes it, moments later); a decision this
# old without one belongs to a run that died between the two steps, and holds none.
APPROVAL_RESERVATION = timedelta(minutes=10)

# What holds a pending-approvals slot: an approval waiting for its decision, and a call whose
# policy decision says it waits for approval, whose key it holds, and that has neither an
# approval row nor a receipt yet (a dry run never holds its key). One statement, so one
# snapshot: counted apart, a call whose approval row commits between the two counts would
# be in neither, and a second call could take the last slot beside it.
_APPROVALS_HELD = text(
    """
SELECT
  (SELECT count(*) FROM approvals a
   WHERE a.tenant_id = :tenant AND a.status = 'pending' AND a.expires_at > :now)
  +
  (SELECT count(*) FROM policy_decisions d
   WHERE d.tenant_id = :tenant AND d.rule_hit = 'APPROVAL_REQUIRED' AND d.decision = 'allow'
     AND d.created_at > :since AND d.receipt_id <> :own
     AND EXISTS (SELECT 1 FROM idempotency_keys k
                 WHERE k.tenant_id = d.tenant_id AND k.idempotency_key = d.idempotency_key
                   AND k.receipt_id = d.receipt_id)
     AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.receipt_id = d.receipt_id)
     AND NOT EXISTS (SELECT 1 FROM receipts r WHERE r.id = d.receipt_id))
"""
)


async def lock(session: AsyncSession, tenant_id: str, quota: Quota) -> None:
    """Hold the (tenant, quota) lock until the transaction ends."""
    await session.execute(
        text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"),
        {"k": f"moat.quota:{tenant_id}:{quota.value}"},
    )


async def overrides(session: AsyncSession, tenant_id: str) -> dict[Quota, int]:
    """The tenant's own limits, by quota (the others use their default)."""
    rows = await session.execute(
        select(TenantQuotaRow.quota, TenantQuotaRow.quota_limit).where(
            TenantQuotaRow.tenant_id == tenant_id
        )
    )
    known = {quota.value for quota in Quota}
    return {Quota(name): limit for name, limit in rows.all() if name in known}


async def override(session: AsyncSession, tenant_id: str, quota: Quota) -> int | None:
    row = await session.get(TenantQuotaRow, (tenant_id, quota.value))
    return row.quota_limit if row is not None else None


async def set_override(
    session: AsyncSession, tenant_id: str, quota: Quota, limit: int | None, now: datetime
) -> None:
    """Set the tenant's own limit for ``quota``; None removes it (the default applies)."""
    if limit is None:
        await session.execute(
            delete(TenantQuotaRow).where(
                TenantQuotaRow.tenant_id == tenant_id, TenantQuotaRow.quota == quota.value
            )
        )
        return
    stmt = insert(TenantQuotaRow).values(
        tenant_id=tenant_id, quota=quota.value, quota_limit=limit, updated_at=now
    )
    await session.execute(
        stmt.on_conflict_do_update(
            index_elements=[TenantQuotaRow.tenant_id, TenantQuotaRow.quota],
            set_={"quota_limit": limit, "updated_at": now},
        )
    )


async def usage(
    session: AsyncSession, tenant_id: str, quota: Quota, now: datetime, own_receipt: str = ""
) -> int:
    """How many the tenant holds now of what ``quota`` counts. For pending approvals,
    ``own_receipt`` is the execution asking, which does not count itself."""
    if quota == Quota.PENDING_APPROVALS:
        held = await session.execute(
            _APPROVALS_HELD,
            {
                "tenant": tenant_id,
                "now": now,
                "since": now - APPROVAL_RESERVATION,
                "own": own_receipt,
            },
        )
        return int(held.scalar_one())
    counted = {
        Quota.WEBHOOKS: select(func.count()).where(
            WebhookSubscription.tenant_id == tenant_id, WebhookSubscription.status != "removed"
        ),
        Quota.PROBES: select(func.count()).where(ProbeRow.tenant_id == tenant_id),
        Quota.CONNECTIONS: select(func.count()).where(
            ConnectionRow.tenant_id == tenant_id, ConnectionRow.revoked_at.is_(None)
        ),
        Quota.POLICY_VERSIONS: select(func.count()).where(PolicyVersionRow.tenant_id == tenant_id),
    }
    return await _count(session, counted[quota])


async def _count(session: AsyncSession, stmt: object) -> int:
    return int((await session.execute(stmt)).scalar_one())  # type: ignore[call-overload]
