"""What the gateway's routes share: their dependencies, and who is calling.

Tenant routes authenticate the ``Authorization: Bearer moat_<id>_<secret>`` key inside the
route's own transaction and scope that transaction to the key's tenant (row-level
security). Admin routes take the admin key from the settings instead.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from starlette.requests import HTTPConnection
from temporalio.client import Client

from schemas.capabilities import CapabilityCatalog
from schemas.settings import MoatSettings
from starter.gateway.access import route_needs
from starter.service import MoatError
from starter.service.executions import DEFAULT_TTL_SECONDS, Executions, Flights, KeyCache
from starter.service.ratelimit import RateLimits
from starter.service.scopes import require_scope
from store import api_keys
from store.keys.codec import OutputSealer
from store.keys.connections import ConnectionCipher


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
    keys: KeyCache = field(default_factory=lambda: KeyCache(DEFAULT_TTL_SECONDS))
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
    return MoatError("execution_not_found", f"No execution {receipt_id[:80]!r}.")


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
    return MoatError("unauthenticated", message)


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
        raise unauthenticated("The API key is unknown or revoked.")
    declared = credentials.required if isinstance(credentials, PresentedKey) else ()
    require_scope(tenant.scopes, *declared, *(s for s in scopes if s not in declared))
    return tenant


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
        raise unauthenticated("The API key is unknown or revoked.")
    deps.keys.keep(presented, tenant, since)


def requires_scope(*scopes: str) -> Callable[[Request, TenantKey], Awaitable[None]]:
    """A route dependency refusing a key without ``scopes`` before the route runs
    (``dependencies=[Depends(requires_scope("policy:write"))]``). Routes that authenticate
    in their own transaction pass the scopes to ``authenticate`` instead."""

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
        raise MoatError("forbidden", "A tenant's API key cannot use the admin API.")
    if configured is None:
        raise MoatError(
            "forbidden", "The admin API is disabled: the gateway has no MOAT_ADMIN_API_KEY."
        )
    raise unauthenticated("The admin key is wrong.")
