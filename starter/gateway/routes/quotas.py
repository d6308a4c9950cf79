"""Quota routes: a tenant reads its quotas and usage (``/v1/quotas``); the admin reads and
sets a tenant's own limits (``/v1/admin/tenants/{tenant_id}/quotas``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request
from sqlalchemy.ext.asyncio import AsyncSession

from schemas.quotas import QuotaUpdate, TenantQuotas
from starter.gateway.deps import TenantKey, authenticate, deps_of, require_admin
from starter.gateway.errors import documented_errors
from starter.service import MoatError, quotas, tenants

router = APIRouter(tags=["quotas"])
admin_router = APIRouter(
    prefix="/v1/admin/tenants/{tenant_id}/quotas",
    tags=["admin"],
    dependencies=[Depends(require_admin)],
    responses=documented_errors(400, 401, 403, 404, 500),
)

TenantId = Annotated[str, Path(max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]

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
async def get_quotas(request: Request, credentials: TenantKey) -> TenantQuotas:
    deps = deps_of(request)
    async with deps.sessions.begin() as session:
        key = await authenticate(session, credentials)
        return await quotas.report(session, deps.settings.quota_limits, key.tenant_id)


@admin_router.get("", summary="A tenant's quotas and usage", response_model=TenantQuotas)
async def admin_get_quotas(request: Request, tenant_id: TenantId) -> TenantQuotas:
    deps = deps_of(request)
    async with deps.sessions.begin() as session:
        await _tenant(session, tenant_id)
        return await quotas.report(session, deps.settings.quota_limits, tenant_id)


@admin_router.patch("", summary="Set a tenant's own limits", response_model=TenantQuotas)
async def admin_set_quotas(
    request: Request, tenant_id: TenantId, body: QuotaUpdate
) -> TenantQuotas:
    """A number sets the tenant's own limit, `null` returns the quota to its default, a
    quota left out keeps its limit. A limit below the usage refuses new creates only:
    nothing the tenant holds is removed."""
    deps = deps_of(request)
    async with deps.sessions.begin() as session:
        await _tenant(session, tenant_id)
        return await quotas.update(session, deps.settings.quota_limits, tenant_id, body)


async def _tenant(session: AsyncSession, tenant_id: str) -> None:
    if await tenants.get_tenant(session, tenant_id) is None:
        raise MoatError("tenant_not_found", f"No tenant {tenant_id!r}.")
