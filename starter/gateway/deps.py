"""What the gateway's routes share: their dependencies, and who is calling.

The boundary owns the transaction. A tenant route takes ``session: TenantSession`` and
``caller: Caller``: one dependency opens the request's transaction, authenticates the
``Authorization: Bearer moat_<id>_<secret>`` key in it with the scopes the route declares
(``access.needs``), scopes it to the key's tenant (row-level security), and commits it once
the handler has returned, before the answer goes out (rolled back when the handler
raises). Admin routes take the admin key from the settings instead (``require_admin``), and
``AdminSession`` / ``AdminTenant`` for their transaction. A route that waits (on Temporal)
holds no transaction across the wait: it takes ``CallerOnly`` and opens its own.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Path, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from starlette.requests import HTTPConnection
from temporalio.client import Client

from schemas.capabilities import CapabilityCatalog
from schemas.errors import ErrorCode
from schemas.settings import MoatSettings
from starter.gateway.access import route_needs
from starter.service import (
    Executions,
    Flights,
    KeyCache,
    MoatError,
    RateLimits,
    require_scope,
    tenants,
)
from store import api_keys
from store.keyrings.codec import OutputSealer
from store.keyrings.connections import ConnectionCipher
from store.models import Tenant


@dataclass
class Deps:
    """Built once in the gateway's lifespan."""

    settings: MoatSettings
    sessions: async_sessionmaker[AsyncSession]
    client: Client
    executions: Executions
    catalog: CapabilityCatalog
    # As the owner role, for the admin writes the application role may not make (a
    # tenant's host allow-list); None when this gateway has no owner URL.
    owner_sessions: async_sessionmaker[AsyncSession] | None = None
    # Seals connection secrets (``POST /v1/connections``); the worker opens them.
    connection_cipher: ConnectionCipher | None = None
    # Seals and opens webhook signing secrets (the codec's keys).
    sealer: OutputSealer | None = None
    # Identical execute requests in flight share one run (``service.executions.flights``).
    flights: Flights = field(default_factory=Flights)
    # API keys verified moments ago (``service.executions.keycache``): answers from memory
    # skip the database round trip. Its TTL is the settings' ``auth_cache_seconds``.
    keys: KeyCache = field(default_factory=lambda: KeyCache())
    # Each tenant's execute requests per second on this gateway (``service.ratelimit``).
    rate_limits: RateLimits = field(default_factory=RateLimits)


def sealer_of(deps: Deps) -> OutputSealer:
    if deps.sealer is None:
        deps.sealer = OutputSealer.from_settings(deps.settings)
    return deps.sealer


def deps_of(request: Request) -> Deps:
    deps: Deps = request.app.state.deps
    return deps


def execution_not_found(receipt_id: str) -> MoatError:
    """The 404 of every execution route (another tenant's executions included)."""
    return MoatError(ErrorCode.EXECUTION_NOT_FOUND, f"No execution {receipt_id[:80]!r}.")


class PresentedKey(HTTPAuthorizationCredentials):
    """A tenant key as presented, with the scopes the matched route declares
    (``access.needs``): ``authenticate`` refuses a key without them."""

    required: tuple[str, ...] = ()


class TenantBearer(HTTPBearer):
    async def __call__(self, request: HTTPConnection) -> HTTPAuthorizationCredentials | None:
        found = await super().__call__(request)
        if found is None:
            return None
        required = route_needs(request.scope.get("route"))
        return PresentedKey(scheme=found.scheme, credentials=found.credentials, required=required)


tenant_bearer = TenantBearer(
    scheme_name="TenantKey",
    description="A tenant's API key: `Authorization: Bearer moat_<id>_<secret>`.",
    auto_error=False,
)
admin_bearer = HTTPBearer(
    scheme_name="AdminKey",
    description="The admin key (`MOAT_ADMIN_API_KEY`); the admin API is off without one.",
    auto_error=False,
)

TenantKey = Annotated[HTTPAuthorizationCredentials | None, Security(tenant_bearer)]
AdminKey = Annotated[HTTPAuthorizationCredentials | None, Security(admin_bearer)]


def unauthenticated(message: str) -> MoatError:
    return MoatError(ErrorCode.UNAUTHENTICATED, message)


async def authenticate(
    session: AsyncSession,
    credentials: HTTPAuthorizationCredentials | None,
    *scopes: str,
) -> api_keys.AuthenticatedTenant:
    """The caller's tenant, whose key must hold every one of ``scopes`` and of the scopes
    its route declares (403 ``scope_missing`` otherwise); the session's transaction is
    scoped to it from here on."""
    if credentials is None:
        raise unauthenticated("Send 'Authorization: Bearer <api key>'.")
    # The lookup names the tenant too (row-level security), in the same round trip.
    tenant = await api_keys.authenticate(session, credentials.credentials, scope=True)
    if tenant is None:
        raise tenants.unknown_key(credentials.credentials)
    declared = credentials.required if isinstance(credentials, PresentedKey) else ()
    require_scope(tenant.scopes, *declared, *(s for s in scopes if s not in declared))
    return tenant


@dataclass(frozen=True)
class _Tenancy:
    session: AsyncSession
    caller: api_keys.AuthenticatedTenant


async def _tenant_transaction(request: Request, credentials: TenantKey) -> AsyncIterator[_Tenancy]:
    """The boundary of a tenant route: its one transaction, in which the key is
    authenticated (401, 403 ``scope_missing``: the handler does not run) and which is scoped
    to the key's tenant. Function-scoped, so it commits when the handler returns, before the
    answer is sent (the caller's next request sees the write), and rolls back when it
    raises."""
    async with deps_of(request).sessions.begin() as session:
        yield _Tenancy(session, await authenticate(session, credentials))


_InTransaction = Annotated[_Tenancy, Depends(_tenant_transaction, scope="function")]


async def _session_of(tenancy: _InTransaction) -> AsyncSession:
    return tenancy.session


async def _caller_of(tenancy: _InTransaction) -> api_keys.AuthenticatedTenant:
    return tenancy.caller


# The request's transaction, scoped to the caller's tenant (one per request, however many
# parameters name it).
TenantSession = Annotated[AsyncSession, Depends(_session_of)]
# Who is calling, authenticated in that transaction with the scopes the route declares.
Caller = Annotated[api_keys.AuthenticatedTenant, Depends(_caller_of)]


async def _authenticated(request: Request, credentials: TenantKey) -> api_keys.AuthenticatedTenant:
    async with deps_of(request).sessions.begin() as session:
        return await authenticate(session, credentials)


# Who is calling, authenticated as ``Caller`` is but in a transaction that has ended when
# the handler runs: for the routes that wait on Temporal, which must not hold a Postgres
# connection across the wait (they open their own short transactions).
CallerOnly = Annotated[api_keys.AuthenticatedTenant, Depends(_authenticated)]


async def verified_key(deps: Deps, credentials: HTTPAuthorizationCredentials | None) -> None:
    """401 unless the presented key is a valid one: verified moments ago (``deps.keys``),
    else by Postgres (then remembered like any key it verifies). For the check that comes
    before any work on a request's body; the route authenticates again in its own
    transaction."""
    if credentials is None:
        raise unauthenticated("Send 'Authorization: Bearer <api key>'.")
    presented = credentials.credentials
    if deps.keys.get(presented) is not None:
        return
    since = deps.keys.now()
    async with deps.sessions.begin() as session:
        tenant = await api_keys.authenticate(session, presented)
    if tenant is None:
        raise tenants.unknown_key(presented)
    deps.keys.keep(presented, tenant, since)


def requires_scope(*scopes: str) -> Callable[[Request, TenantKey], Awaitable[None]]:
    """A route dependency refusing a key without ``scopes`` before the route runs, in a
    transaction of its own (``dependencies=[Depends(requires_scope("policy:write"))]``).
    The gateway's own routes declare their scopes with ``access.needs`` instead, which
    ``Caller`` enforces in the request's transaction."""

    async def check(request: Request, credentials: TenantKey) -> None:
        async with deps_of(request).sessions.begin() as session:
            await authenticate(session, credentials, *scopes)

    return check


def same_secret(presented: str, expected: str) -> bool:
    """Constant-time comparison that does not reveal the expected length either."""
    return hmac.compare_digest(
        hashlib.sha256(presented.encode()).digest(), hashlib.sha256(expected.encode()).digest()
    )


async def require_admin(request: Request, credentials: AdminKey) -> None:
    """Guard of the admin routes: 401 without a valid key, 403 for a tenant's key or when
    the admin API is disabled."""
    if credentials is None:
        raise unauthenticated("Send 'Authorization: Bearer <admin key>'.")
    deps = deps_of(request)
    configured = deps.settings.admin_api_key
    if configured is not None and same_secret(
        credentials.credentials, configured.get_secret_value()
    ):
        return
    async with deps.sessions.begin() as session:
        tenant = await api_keys.authenticate(session, credentials.credentials)
    if tenant is not None:
        raise MoatError(ErrorCode.FORBIDDEN, "A tenant's API key cannot use the admin API.")
    if configured is None:
        raise MoatError(
            ErrorCode.FORBIDDEN, "The admin API is disabled: the gateway has no MOAT_ADMIN_API_KEY."
        )
    raise unauthenticated("The admin key is wrong.")


async def _admin_transaction(request: Request) -> AsyncIterator[AsyncSession]:
    """The boundary of an admin route (behind ``require_admin``): its one transaction, not
    scoped to a tenant until the route names one. Commits when the handler returns, rolls
    back when it raises."""
    async with deps_of(request).sessions.begin() as session:
        yield session


AdminSession = Annotated[AsyncSession, Depends(_admin_transaction, scope="function")]
TenantId = Annotated[str, Path(max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]


def tenant_not_found(tenant_id: str) -> MoatError:
    return MoatError(ErrorCode.TENANT_NOT_FOUND, f"No tenant {tenant_id!r}.")


async def _named_tenant(session: AdminSession, tenant_id: TenantId) -> Tenant:
    tenant = await tenants.get_tenant(session, tenant_id)
    if tenant is None:
        raise tenant_not_found(tenant_id)
    return tenant


# The tenant an admin route's path names (``{tenant_id}``), which must exist (404
# ``tenant_not_found``); the route's ``AdminSession`` is scoped to it from then on.
AdminTenant = Annotated[Tenant, Depends(_named_tenant)]
