"""Admin routes (``/v1/admin``): tenants and their API keys, behind the admin key.

The same operations as ``moat tenant …`` and ``moat api-key …`` (``starter.service.tenants``
holds their rules). Each transaction is scoped to the tenant it touches; listing every
tenant goes through the database's one cross-tenant function for it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Path, Request

from schemas.api import (
    ApiKeyCreate,
    ApiKeyInfo,
    NewApiKey,
    NewTenant,
    TenantCreate,
    TenantInfo,
    TenantUpdate,
)
from schemas.approvals import ADMIN_ACTOR, Approval, ApprovalDecision
from schemas.errors import ErrorCode
from schemas.pages import ApiKeyPage, TenantPage
from schemas.policy import PolicyDocument, PolicyVersion
from starter.gateway.deps import (
    AdminSession,
    AdminTenant,
    TenantId,
    deps_of,
    require_admin,
    tenant_not_found,
)
from starter.gateway.errors import documented_errors
from starter.gateway.pages import DEFAULT_LIMIT, Cursor, Limit, by_creation
from starter.service import MoatError, approvals, pages, policy, tenants

router = APIRouter(
    prefix="/v1/admin",
    tags=["admin"],
    dependencies=[Depends(require_admin)],
    responses=documented_errors(400, 401, 403, 500),
)

KeyId = Annotated[str, Path(max_length=64, pattern=r"^[A-Za-z0-9]+$")]


@router.post(
    "/tenants",
    status_code=201,
    summary="Create a tenant and its first API key",
    response_model=NewTenant,
    responses=documented_errors(400, 409),
)
async def create_tenant(request: Request, session: AdminSession, body: TenantCreate) -> NewTenant:
    """The key's secret (`api_key.api_key`) is in this answer only; store it now."""
    ttl = body.idempotency_ttl_seconds or deps_of(request).settings.idempotency_ttl_seconds
    return await tenants.create_tenant(
        session, body.name, idempotency_ttl_seconds=ttl, policy_mode=body.policy_mode.value
    )


@router.get("/tenants", summary="List tenants, oldest first", response_model=TenantPage)
async def list_tenants(
    session: AdminSession, limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None
) -> TenantPage:
    after = pages.after(cursor, (datetime, str))  # the admin key is checked before
    rows = await tenants.list_tenants(session, after, limit + 1)
    return TenantPage(**pages.cut(rows, limit, by_creation))


@router.get(
    "/tenants/{tenant_id}",
    summary="One tenant",
    response_model=TenantInfo,
    responses=documented_errors(404),
)
async def get_tenant(tenant: AdminTenant) -> TenantInfo:
    return tenants.tenant_info(tenant)


@router.patch(
    "/tenants/{tenant_id}",
    summary="Change a tenant's settings (host allow-list, whether it may use bypass)",
    response_model=TenantInfo,
    responses=documented_errors(404),
)
async def update_tenant(request: Request, tenant_id: TenantId, body: TenantUpdate) -> TenantInfo:
    """Fields left out keep their value. `http_allow_hosts` replaces the tenant's list of
    non-public hosts its `http.request` may call, besides the worker's own list: `host`
    (ports 80 and 443 only) or `host:port`, IPv6 as `[address]:port`; an address also admits
    names resolving to it. `allow_bypass` lets the tenant set policy mode `bypass` (every
    bypassed execution is recorded as such); false takes it back, and a tenant whose policy
    says `bypass` is then held to `standard`. Written as the database owner role, so this
    gateway needs the owner's URL (`MOAT_DATABASE_URL`)."""
    # Its own transaction, as the owner role: the application role may not write these.
    owner = deps_of(request).owner_sessions
    if owner is None:
        raise MoatError(
            ErrorCode.FORBIDDEN,
            "This gateway has no owner database URL (MOAT_DATABASE_URL), which a tenant's "
            "allow-list is written with: set it on an internal gateway, or run "
            "`moat tenant allow-hosts`.",
        )
    async with owner.begin() as session:
        tenant = await tenants.get_tenant(session, tenant_id)
        if tenant is None:
            raise tenant_not_found(tenant_id)
        if body.allow_bypass is not None:
            await tenants.set_allow_bypass(session, tenant, body.allow_bypass)
        if body.http_allow_hosts is None:
            return tenants.tenant_info(tenant)
        return await tenants.set_allow_hosts(session, tenant, body.http_allow_hosts)


@router.post(
    "/tenants/{tenant_id}/keys",
    status_code=201,
    summary="Create an API key for a tenant",
    response_model=NewApiKey,
    responses=documented_errors(400, 404),
)
async def create_key(tenant: AdminTenant, session: AdminSession, body: ApiKeyCreate) -> NewApiKey:
    """The secret (`api_key`) is in this answer only; store it now. `scopes` default to
    `["execute:*", "outputs:read"]`."""
    return await tenants.create_key(session, tenant.id, body.name, body.scopes)


@router.get(
    "/tenants/{tenant_id}/keys",
    summary="List a tenant's API keys (never their secrets), oldest first",
    response_model=ApiKeyPage,
    responses=documented_errors(404),
)
async def list_keys(
    tenant: AdminTenant, session: AdminSession, limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None
) -> ApiKeyPage:
    after = pages.after(cursor, (datetime, str))
    rows = await tenants.list_keys(session, tenant.id, after, limit + 1)
    return ApiKeyPage(**pages.cut(rows, limit, by_creation))


@router.post(
    "/keys/{key_id}/revoke",
    summary="Revoke an API key, effective at once",
    response_model=ApiKeyInfo,
    responses=documented_errors(404),
)
async def revoke_key(request: Request, key_id: KeyId) -> ApiKeyInfo:
    """The next request with the key is `unauthenticated` (other gateways' answers from
    memory: within `MOAT_AUTH_CACHE_SECONDS`). Revoking twice keeps the first revocation
    time."""
    deps = deps_of(request)
    # Its own transaction, committed before this gateway forgets the key: forgotten first,
    # a request in between would verify the key again and remember it for the TTL.
    async with deps.sessions.begin() as session:
        key = await tenants.revoke_key(session, key_id, datetime.now(UTC))
    if key is None:
        raise MoatError(ErrorCode.KEY_NOT_FOUND, f"No API key {key_id!r}.")
    deps.keys.forget(key_id)
    return key


@router.get(
    "/tenants/{tenant_id}/policy",
    summary="A tenant's policy in force",
    response_model=PolicyVersion,
    responses=documented_errors(404),
)
async def get_tenant_policy(tenant: AdminTenant, session: AdminSession) -> PolicyVersion:
    return await policy.current(session, tenant)


@router.put(
    "/tenants/{tenant_id}/policy",
    summary="Replace a tenant's policy (a new version)",
    response_model=PolicyVersion,
    responses=documented_errors(404, 429),
)
async def put_tenant_policy(
    request: Request, tenant: AdminTenant, session: AdminSession, body: PolicyDocument
) -> PolicyVersion:
    """As `PUT /v1/policy`, recorded as made by `admin`."""
    limits = deps_of(request).settings.quota_limits
    return await policy.replace(session, tenant, body, ADMIN_ACTOR, limits)


@router.post(
    "/tenants/{tenant_id}/approvals/{approval_id}/{action}",
    summary="Approve or reject a tenant's pending call as the admin",
    response_model=Approval,
    responses=documented_errors(404, 409),
)
async def decide_approval(
    request: Request,
    tenant_id: TenantId,
    approval_id: Annotated[str, Path(max_length=64, pattern=r"^apr_[0-9a-f]+$")],
    action: Literal["approve", "reject"],
    body: ApprovalDecision,
) -> Approval:
    """The same binding and checks as `/v1/approvals/{id}/approve|reject`; the decider on
    the record is `admin`."""
    # No request-long transaction: the decision waits for the run's answer (a Temporal
    # update), and the service reads and re-reads the approval in short ones around it.
    deps = deps_of(request)
    return await approvals.decide(
        deps.sessions,
        deps.client,
        deps.executions.sealer,
        deps.executions.start_keys,
        tenant_id=tenant_id,
        approval_id=approval_id,
        action=action,
        decision=body,
        actor=ADMIN_ACTOR,
    )
