"""Per-tenant quotas: the guard every create path calls before its insert, the tenant's
view of its quotas, and the admin's override.

A limit is the tenant's own (set by an admin) or else the default (``MOAT_QUOTA_<NAME>``).
The guard runs in the create's transaction: it takes the (tenant, quota) lock, counts and
refuses at the limit, so two creates racing for the last slot cannot both pass.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncSession

from schemas.errors import ErrorCode
from schemas.quotas import (
    COUNTS,
    DEFAULT_QUOTAS,
    Quota,
    QuotaLimits,
    QuotaState,
    QuotaUpdate,
    TenantQuotas,
    exceeded,
)
from starter.service.errors import MoatError
from store import quotas

DEFAULT = "default"
TENANT = "tenant"


async def guard(
    session: AsyncSession, defaults: QuotaLimits | None, tenant_id: str, quota: Quota
) -> None:
    """Refuse (``quota_exceeded``) when the tenant already holds its limit of ``quota``;
    otherwise hold the quota's lock until the caller's transaction ends, so its insert is
    counted by the next create. ``defaults``: the settings' (None: the built-in ones)."""
    await quotas.lock(session, tenant_id, quota)
    own = await quotas.override(session, tenant_id, quota)
    limit = own if own is not None else (defaults or DEFAULT_QUOTAS)[quota]
    usage = await quotas.usage(session, tenant_id, quota, datetime.now(UTC))
    if usage >= limit:
        message, details = exceeded(quota, limit, usage, TENANT if own is not None else DEFAULT)
        raise MoatError(ErrorCode.QUOTA_EXCEEDED, message, details)


async def report(session: AsyncSession, defaults: QuotaLimits, tenant_id: str) -> TenantQuotas:
    """Every quota of the tenant: limit, where it comes from, usage now."""
    own = await quotas.overrides(session, tenant_id)
    now = datetime.now(UTC)
    states = [
        QuotaState(
            quota=quota,
            limit=own.get(quota, defaults[quota]),
            usage=await quotas.usage(session, tenant_id, quota, now),
            source=TENANT if quota in own else DEFAULT,
            counts=COUNTS[quota],
        )
        for quota in Quota
    ]
    return TenantQuotas(tenant_id=tenant_id, quotas=states)


async def update(
    session: AsyncSession, defaults: QuotaLimits, tenant_id: str, body: QuotaUpdate
) -> TenantQuotas:
    """Set (or with null clear) the tenant's own limits; a lower limit than the usage
    refuses new creates only: nothing the tenant holds is removed."""
    now = datetime.now(UTC)
    for quota, limit in body.changes().items():
        await quotas.set_override(session, tenant_id, quota, limit, now)
    return await report(session, defaults, tenant_id)
