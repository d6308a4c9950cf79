"""Admin routes (``/v1/admin``): tenants and their API keys, behind the admin key.

The same operations as ``moat tenant …`` and ``moat key …``. Each transaction is scoped to
the tenant it touches; listing every tenant goes through the database's one cross-tenant
function for it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request
from sqlalchemy.exc import IntegrityError

from schemas.api import (
    ApiKeyCreate,
    ApiKeyInfo,
    NewApiKey,
    NewTenant,
    TenantCreate,
    TenantInfo,
    TenantUpdate,
)
from starter.gateway.deps import deps_of, require_admin
from starter.gateway.errors import ApiError, documented_errors
from store import api_keys, tenancy, tenants

router = APIRouter(
    prefix="/v1/admin",
    tags=["admin"],
    dependencies=[Depends(require_admin)],
    responses=documented_errors(400, 401, 403, 500),
)

TenantId = Annotated[str, Path(max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
KeyId = Annotated[str, Path(max_length=64, pattern=r"^[A-Za-z0-9]+$")]


def _no_tenant(tenant_id: str) -> ApiError:
    return ApiError(404, "tenant_not_found", f"No tenant {tenant_id!r}.")


@router.post(
    "/tenants",
    status_code=201,
    summary="Create a tenant and its first API key",
    response_model=NewTenant,
    responses=documented_errors(400, 409),
)
async def create_tenant(request: Request, body: TenantCreate) -> NewTenant:
    """The key's secret (`api_key.api_key`) is in this answer only; store it now."""
    deps = deps_of(request)
    ttl = body.idempotency_ttl_seconds or deps.settings.idempotency_ttl_seconds
    try:
        async with deps.sessions.begin() as session:
            tenant = await tenants.create_tenant(
                session, body.name, idempotency_ttl_seconds=ttl, policy_mode=body.policy_mode.value
            )
            key, secret = await api_keys.issue_api_key(session, tenant.id, name="initial")
            await session.refresh(tenant)
    except IntegrityError as err:
        raise ApiError(409, "conflict", f"A tenant named {body.name!r} exists.") from err
    return NewTenant(
        tenant=tenants.to_tenant_info(tenant),
        api_key=api_keys.to_new_key(key, secret),
    )


@router.get("/tenants", summary="List tenants", response_model=list[TenantInfo])
async def list_tenants(request: Request) -> list[TenantInfo]:
    async with deps_of(request).sessions.begin() as session:
        return [tenants.to_tenant_info(t) for t in await tenants.list_tenants(session)]


@router.get(
    "/tenants/{tenant_id}",
    summary="One tenant",
    response_model=TenantInfo,
    responses=documented_errors(404),
)
async def get_tenant(request: Request, tenant_id: TenantId) -> TenantInfo:
    async with tenancy.tenant_transaction(deps_of(request).sessions, tenant_id) as session:
        tenant = await tenants.get_tenant(session, tenant_id)
    if tenant is None:
        raise _no_tenant(tenant_id)
    return tenants.to_tenant_info(tenant)


@router.patch(
    "/tenants/{tenant_id}",
    summary="Change a tenant's settings (its http.request host allow-list)",
    response_model=TenantInfo,
    responses=documented_errors(404),
)
async def update_tenant(request: Request, tenant_id: TenantId, body: TenantUpdate) -> TenantInfo:
    """Fields left out keep their value. `http_allow_hosts` replaces the tenant's list of
    non-public hosts its `http.request` may call, besides the worker's own list: `host`
    (ports 80 and 443 only) or `host:port`, IPv6 as `[address]:port`; an address also admits
    names resolving to it. Written as the database owner role, so this gateway needs the
    owner's URL (`MOAT_DATABASE_URL`)."""
    owner = deps_of(request).owner_sessions
    if owner is None:
        raise ApiError(
            403,
            "forbidden",
            "This gateway has no owner database URL (MOAT_DATABASE_URL), which a tenant's "
            "allow-list is written with: set it on an internal gateway, or run "
            "`moat tenant allow-hosts`.",
        )
    async with tenancy.tenant_transaction(owner, tenant_id) as session:
        tenant = await tenants.get_tenant(session, tenant_id)
        if tenant is None:
            raise _no_tenant(tenant_id)
        if body.http_allow_hosts is not None:
            tenant = await tenants.set_http_allow_hosts(session, tenant_id, body.http_allow_hosts)
            assert tenant is not None
        info = tenants.to_tenant_info(tenant)
    return info


@router.post(
    "/tenants/{tenant_id}/keys",
    status_code=201,
    summary="Create an API key for a tenant",
    response_model=NewApiKey,
    responses=documented_errors(400, 404),
)
async def create_key(request: Request, tenant_id: TenantId, body: ApiKeyCreate) -> NewApiKey:
    """The secret (`api_key`) is in this answer only; store it now."""
    async with tenancy.tenant_transaction(deps_of(request).sessions, tenant_id) as session:
        if await tenants.get_tenant(session, tenant_id) is None:
            raise _no_tenant(tenant_id)
        key, secret = await api_keys.issue_api_key(session, tenant_id, body.name)
    return api_keys.to_new_key(key, secret)


@router.get(
    "/tenants/{tenant_id}/keys",
    summary="List a tenant's API keys (never their secrets)",
    response_model=list[ApiKeyInfo],
    responses=documented_errors(404),
)
async def list_keys(request: Request, tenant_id: TenantId) -> list[ApiKeyInfo]:
    async with tenancy.tenant_transaction(deps_of(request).sessions, tenant_id) as session:
        if await tenants.get_tenant(session, tenant_id) is None:
            raise _no_tenant(tenant_id)
        return [api_keys.to_key_info(k) for k in await api_keys.list_api_keys(session, tenant_id)]


@router.post(
    "/keys/{key_id}/revoke",
    summary="Revoke an API key, effective at once",
    response_model=ApiKeyInfo,
    responses=documented_errors(404),
)
async def revoke_key(request: Request, key_id: KeyId) -> ApiKeyInfo:
    """The next request with the key is `unauthenticated`. Revoking twice keeps the first
    revocation time."""
    async with deps_of(request).sessions.begin() as session:
        tenant_id = await api_keys.key_tenant(session, key_id)
        key = None
        if tenant_id is not None:
            await tenancy.set_tenant(session, tenant_id)
            key = await api_keys.revoke_api_key(session, key_id, datetime.now(UTC))
    if key is None:
        raise ApiError(404, "key_not_found", f"No API key {key_id!r}.")
    return api_keys.to_key_info(key)
