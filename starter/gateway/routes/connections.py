"""Connection routes: a tenant's credentials, stored once and named by id in executions.

With a tenant's key (`/v1/connections`; writes need the `connections:write` scope) and with
the admin key (`/v1/admin/tenants/{tenant_id}/connections`). No route ever answers a
secret: a connection is shown by its fingerprint and at most its last 4 characters.
"""

from __future__ import annotations

import html
from datetime import UTC, datetime
from typing import Annotated

import httpx
from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import HTMLResponse

from schemas.connections import (
    CONNECTION_ID_PATTERN,
    ConnectionCreate,
    ConnectionInfo,
    ConnectionRotate,
)
from schemas.errors import ErrorCode
from schemas.pages import ConnectionPage
from schemas.scopes import CONNECTIONS_WRITE
from starter.gateway.access import needs, public
from starter.gateway.deps import (
    AdminSession,
    AdminTenant,
    Caller,
    Deps,
    TenantSession,
    deps_of,
    require_admin,
)
from starter.gateway.errors import documented_errors
from starter.gateway.pages import DEFAULT_LIMIT, Cursor, Limit, by_creation
from starter.service import MoatError, connections, oauth_connect, pages
from store import tenancy
from store.keyrings.connections import ConnectionCipher

router = APIRouter(prefix="/v1/connections", tags=["connections"])
admin_router = APIRouter(
    prefix="/v1/admin/tenants/{tenant_id}/connections",
    tags=["admin"],
    dependencies=[Depends(require_admin)],
    responses=documented_errors(401, 403, 404, 500),
)

ConnectionId = Annotated[str, Path(max_length=64, pattern=CONNECTION_ID_PATTERN)]


def _cipher(deps: Deps) -> ConnectionCipher:
    if deps.connection_cipher is None:
        raise MoatError(ErrorCode.GATEWAY_ERROR, "This gateway has no connection keyring.")
    return deps.connection_cipher


@router.post(
    "",
    status_code=201,
    summary="Store a credential once; executions name it by id",
    response_model=ConnectionInfo,
    responses=documented_errors(400, 401, 403, 429, 500),
    dependencies=[needs(CONNECTIONS_WRITE)],
)
async def create_connection(
    request: Request, session: TenantSession, caller: Caller, body: ConnectionCreate
) -> ConnectionInfo:
    """The secret is sealed (AES-256-GCM) and opened only by the worker, at the call; it
    is never answered (`fingerprint` and `last4` tell secrets apart). Needs the
    `connections:write` scope."""
    deps = deps_of(request)
    return await connections.add(
        session, _cipher(deps), caller.tenant_id, body, deps.settings.quota_limits
    )


@router.get(
    "",
    summary="List the tenant's connections, revoked ones included, oldest first",
    response_model=ConnectionPage,
    responses=documented_errors(400, 401, 500),
)
async def list_connections(
    session: TenantSession, caller: Caller, limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None
) -> ConnectionPage:
    after = pages.after(cursor, (datetime, str))
    rows = await connections.list_all(session, caller.tenant_id, after, limit + 1)
    return ConnectionPage(**pages.cut(rows, limit, by_creation))


@router.get(
    "/{connection_id}",
    summary="One connection",
    response_model=ConnectionInfo,
    responses=documented_errors(400, 401, 404, 410, 500),
)
async def show_connection(
    session: TenantSession, caller: Caller, connection_id: ConnectionId
) -> ConnectionInfo:
    """Another tenant's connection is `404 connection_not_found`; a revoked one is
    `410 connection_gone` (the list still shows it)."""
    return await connections.show(session, caller.tenant_id, connection_id, revoked_too=False)


@router.post(
    "/{connection_id}/rotate",
    summary="Replace a connection's secret",
    response_model=ConnectionInfo,
    responses=documented_errors(400, 401, 403, 404, 500),
    dependencies=[needs(CONNECTIONS_WRITE)],
)
async def rotate_connection(
    request: Request,
    session: TenantSession,
    caller: Caller,
    connection_id: ConnectionId,
    body: ConnectionRotate,
) -> ConnectionInfo:
    """Runs use the new secret from their next attempt on. A revoked connection cannot be
    rotated (`403 connection_revoked`). Needs `connections:write`."""
    cipher = _cipher(deps_of(request))
    now = datetime.now(UTC)
    return await connections.rotate(
        session, cipher, caller.tenant_id, connection_id, body.secret, now
    )


@router.delete(
    "/{connection_id}",
    summary="Revoke a connection (kept for the record, unusable)",
    response_model=ConnectionInfo,
    responses=documented_errors(400, 401, 403, 404, 500),
    dependencies=[needs(CONNECTIONS_WRITE)],
)
async def revoke_connection(
    session: TenantSession, caller: Caller, connection_id: ConnectionId
) -> ConnectionInfo:
    """Executions naming it fail from their next attempt on with `403 connection_revoked`.
    Revoking twice keeps the first time. Needs `connections:write`."""
    return await connections.revoke(session, caller.tenant_id, connection_id, datetime.now(UTC))


@admin_router.post(
    "",
    status_code=201,
    summary="Store a credential for a tenant",
    response_model=ConnectionInfo,
    responses=documented_errors(429),
)
async def admin_create_connection(
    request: Request, tenant: AdminTenant, session: AdminSession, body: ConnectionCreate
) -> ConnectionInfo:
    deps = deps_of(request)
    return await connections.add(
        session, _cipher(deps), tenant.id, body, deps.settings.quota_limits
    )


@admin_router.get(
    "",
    summary="List a tenant's connections",
    response_model=ConnectionPage,
    responses=documented_errors(400),
)
async def admin_list_connections(
    tenant: AdminTenant,
    session: AdminSession,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
) -> ConnectionPage:
    after = pages.after(cursor, (datetime, str))
    rows = await connections.list_all(session, tenant.id, after, limit + 1)
    return ConnectionPage(**pages.cut(rows, limit, by_creation))


@admin_router.get(
    "/{connection_id}",
    summary="One connection of a tenant",
    response_model=ConnectionInfo,
    responses=documented_errors(410),
)
async def admin_show_connection(
    tenant: AdminTenant, session: AdminSession, connection_id: ConnectionId
) -> ConnectionInfo:
    """A revoked connection is `410 connection_gone` (the list still shows it)."""
    return await connections.show(session, tenant.id, connection_id, revoked_too=False)


@admin_router.post(
    "/{connection_id}/rotate",
    summary="Replace a tenant's connection secret",
    response_model=ConnectionInfo,
)
async def admin_rotate_connection(
    request: Request,
    tenant: AdminTenant,
    session: AdminSession,
    connection_id: ConnectionId,
    body: ConnectionRotate,
) -> ConnectionInfo:
    cipher = _cipher(deps_of(request))
    now = datetime.now(UTC)
    return await connections.rotate(session, cipher, tenant.id, connection_id, body.secret, now)


@admin_router.delete(
    "/{connection_id}", summary="Revoke a tenant's connection", response_model=ConnectionInfo
)
async def admin_revoke_connection(
    tenant: AdminTenant, session: AdminSession, connection_id: ConnectionId
) -> ConnectionInfo:
    return await connections.revoke(session, tenant.id, connection_id, datetime.now(UTC))


@router.get(
    "/oauth/callback",
    summary="Where a provider sends a person back after connecting an OAuth 2 account",
    responses=documented_errors(400, 403, 404),
    dependencies=[
        public(
            "the provider's redirect carries no bearer; authenticated by its `state`, sealed "
            "by this Moat and bound to the tenant, the connection and the PKCE verifier"
        )
    ],
)
async def oauth_callback(
    request: Request,
    state: Annotated[str, Query(max_length=2000)],
    code: Annotated[str, Query(max_length=2000)] = "",
    error: Annotated[str, Query(max_length=200)] = "",
) -> HTMLResponse:
    """Exchanges the authorization code (with the PKCE verifier the state seals) and stores
    the pair sealed; the connection's `needs_reauth` mark, if any, goes."""
    deps = deps_of(request)
    cipher = _cipher(deps)
    tenant_id, connection_id, verifier = oauth_connect.open_state(cipher, state)
    if error or not code:
        raise MoatError(
            ErrorCode.FORBIDDEN,
            "The provider did not grant the connection: run `moat connection connect` again.",
        )
    allow = list(deps.settings.http_allow_hosts)
    async with (
        httpx.AsyncClient(follow_redirects=False) as http,
        tenancy.tenant_transaction(deps.sessions, tenant_id) as session,
    ):
        await oauth_connect.finish(
            session,
            cipher,
            http,
            tenant_id=tenant_id,
            connection_id=connection_id,
            verifier=verifier,
            code=code,
            redirect_uri=oauth_connect.redirect_uri(deps.settings),
            allow=allow,
        )
    if oauth_connect.from_console(cipher, state):
        # A page that moves on by itself, not a redirect: the console's Strict session
        # cookie is not sent on the provider's cross-site navigation.
        back = f"/console/connections?connected={html.escape(connection_id)}"
        return HTMLResponse(
            '<!doctype html><html lang="en"><head><title>Connected</title>'
            f'<meta http-equiv="refresh" content="0;url={back}"></head><body><main>'
            f'<h1>Connected</h1><p><a href="{back}">Back to the console</a></p>'
            "</main></body></html>"
        )
    return HTMLResponse(
        '<!doctype html><html lang="en"><head><title>Connected</title></head><body><main>'
        f"<h1>Connected</h1><p>Connection <code>{html.escape(connection_id)}</code> is "
        "connected; you may close this page.</p></main></body></html>"
    )
