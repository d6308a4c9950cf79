"""Quota routes: a tenant reads its quotas and usage (``/v1/quotas``); the admin reads and
sets a tenant's own limits (``/v1/admin/tenants/{tenant_id}/quotas``)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from schemas.quotas import QuotaUpdate, TenantQuotas
from starter.gateway.deps import (
    AdminSession,
    AdminTenant,
    Caller,
    TenantSession,
    deps_of,
    require_admin,
)
from starter.gateway.errors import documented_errors
from starter.service import quotas

router = APIRouter(tags=["quotas"])
admin_router = APIRouter(
    prefix="/v1/admin/tenants/{tenant_id}/quotas",
    tags=["admin"],
    dependencies=[Depends(require_admin)],
    responses=documented_errors(400, 401, 403, 404, 500),
)

QUOTAS = (
    "Each quota's `limit` (the tenant's own, set by an admin, else the `MOAT_QUOTA_<NAME>` "
    "default: `source`), what it `counts`, and the `usage` now. A create at the limit is "
    "`429 quota_exceeded`; a call that would wait for approval beyond `pending_approvals` "
    "fails with it."
)


@router.get(
    "/v1/quotas",
    summary="The caller's quotas and usage",
    response_model=TenantQuotas,
    responses=documented_errors(401, 500),
    description=QUOTAS,
)
async def get_quotas(request: Request, session: TenantSession, caller: Caller) -> TenantQuotas:
    limits = deps_of(request).settings.quota_limits
    return await quotas.report(session, limits, caller.tenant_id)


@admin_router.get("", summary="A tenant's quotas and usage", response_model=TenantQuotas)
async def admin_get_quotas(
    request: Request, tenant: AdminTenant, session: AdminSession
) -> TenantQuotas:
    return await quotas.report(session, deps_of(request).settings.quota_limits, tenant.id)


@admin_router.patch("", summary="Set a tenant's own limits", response_model=TenantQuotas)
async def admin_set_quotas(
    request: Request, tenant: AdminTenant, session: AdminSession, body: QuotaUpdate
) -> TenantQuotas:
    """A number sets the tenant's own limit, `null` returns the quota to its default, a
    quota left out keeps its limit. A limit below the usage refuses new creates only:
    nothing the tenant holds is removed."""
    limits = deps_of(request).settings.quota_limits
    return await quotas.update(session, limits, tenant.id, body)
