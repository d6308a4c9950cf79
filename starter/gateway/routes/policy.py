"""Policy routes (``/v1/policy``): the tenant's policy document, each ``PUT`` a new version.
Reading needs any key of the tenant; replacing needs the scope ``policy:write``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from sqlalchemy.ext.asyncio import AsyncSession

from schemas.approvals import key_actor
from schemas.errors import ErrorCode
from schemas.pages import PolicyVersionPage
from schemas.policy import PolicyDocument, PolicyVersion
from schemas.scopes import POLICY_WRITE
from starter.gateway.access import needs
from starter.gateway.deps import Caller, TenantSession, deps_of
from starter.gateway.errors import documented_errors
from starter.gateway.pages import DEFAULT_LIMIT, Cursor, Limit
from starter.service import MoatError, pages, policy, tenants
from store.models import Tenant

router = APIRouter(prefix="/v1/policy", tags=["policy"], responses=documented_errors(401, 403, 500))

Version = Annotated[int, Path(ge=0, le=2**31 - 1)]


@router.get("", summary="The policy in force", response_model=PolicyVersion)
async def get_policy(session: TenantSession, caller: Caller) -> PolicyVersion:
    """Mode, rules and `version` (0: the tenant's mode before its first document)."""
    return await policy.current(session, await _tenant(session, caller.tenant_id))


@router.put(
    "",
    summary="Replace the policy (a new version)",
    response_model=PolicyVersion,
    responses=documented_errors(400, 429),
    dependencies=[needs(POLICY_WRITE)],
)
async def put_policy(
    request: Request, session: TenantSession, caller: Caller, body: PolicyDocument
) -> PolicyVersion:
    """Stores the document as the next version and answers it with its `version`. It
    applies to executions checked from now on; approvals pending under an older version
    become stale. `bypass` needs an operator's consent (`bypass_not_allowed`)."""
    tenant = await _tenant(session, caller.tenant_id)
    limits = deps_of(request).settings.quota_limits
    return await policy.replace(session, tenant, body, key_actor(caller.key_id), limits)


@router.get(
    "/versions",
    summary="The versions, newest first",
    response_model=PolicyVersionPage,
    responses=documented_errors(400),
)
async def list_versions(
    session: TenantSession, caller: Caller, limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None
) -> PolicyVersionPage:
    after = pages.after(cursor, (int,))
    tenant = await _tenant(session, caller.tenant_id)
    rows = await policy.history(session, tenant, after, limit + 1)
    return PolicyVersionPage(**pages.cut(rows, limit, lambda v: (v.version,)))


@router.get(
    "/versions/{version}",
    summary="One version",
    response_model=PolicyVersion,
    responses=documented_errors(404),
)
async def get_version(session: TenantSession, caller: Caller, version: Version) -> PolicyVersion:
    return await policy.version(session, await _tenant(session, caller.tenant_id), version)


async def _tenant(session: AsyncSession, tenant_id: str) -> Tenant:
    tenant = await tenants.get_tenant(session, tenant_id)
    if tenant is None:
        raise MoatError(ErrorCode.TENANT_NOT_FOUND, f"No tenant {tenant_id!r}.")
    return tenant
