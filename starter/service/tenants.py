"""Tenants and their API keys, for the admin API and the CLI alike.

One rule creates a tenant: its name is unique, and the database's unique constraint is
what says so (a scan for the name first would race another creation). Lookups return None
for "no such tenant" or "no such key"; each surface words that itself.

Every function takes the caller's session: the caller owns the transaction. Those that
touch one tenant's rows scope the transaction to it (row-level security).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from psycopg import errors as pg_errors
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from schemas.api import ApiKeyInfo, NewApiKey, NewTenant, TenantInfo, WhoAmI
from schemas.errors import ErrorCode
from schemas.hosts import normalize_allow_list
from schemas.pages import Key
from schemas.scopes import DEFAULT_SCOPES, valid_scope
from starter.service.errors import MoatError
from store import api_keys, tenancy, tenants
from store.models import Tenant

UNIQUE_NAME = "uq_tenants_name"
FIRST_KEY_NAME = "initial"


async def create_tenant(
    session: AsyncSession,
    name: str,
    *,
    idempotency_ttl_seconds: int,
    policy_mode: str = "standard",
    key_name: str = FIRST_KEY_NAME,
    scopes: Sequence[str] = DEFAULT_SCOPES,
) -> NewTenant:
    """A tenant and its first API key (the secret is in this answer only); the rest of the
    transaction is scoped to it. ``MoatError("conflict")`` when the name is taken."""
    try:
        tenant = await tenants.create_tenant(
            session, name, idempotency_ttl_seconds=idempotency_ttl_seconds, policy_mode=policy_mode
        )
    except IntegrityError as err:
        if not _violates(err, UNIQUE_NAME):
            raise
        raise MoatError(ErrorCode.CONFLICT, f"A tenant named {name!r} already exists.") from err
    key, secret = await api_keys.issue_api_key(session, tenant.id, name=key_name, scopes=scopes)
    await session.refresh(tenant)
    return NewTenant(
        tenant=tenants.to_tenant_info(tenant), api_key=api_keys.to_new_key(key, secret)
    )


def _violates(err: IntegrityError, constraint: str) -> bool:
    orig = err.orig
    return isinstance(orig, pg_errors.UniqueViolation) and orig.diag.constraint_name == constraint


async def list_tenants(
    session: AsyncSession, after: Key | None = None, limit: int | None = None
) -> list[TenantInfo]:
    """The tenants, oldest first (the operators' directory)."""
    return [tenants.to_tenant_info(t) for t in await tenants.list_tenants(session, after, limit)]


async def get_tenant(session: AsyncSession, tenant_id: str) -> Tenant | None:
    """The tenant with this id; the transaction is scoped to it."""
    await tenancy.set_tenant(session, tenant_id)
    return await tenants.get_tenant(session, tenant_id)


async def find_tenant(session: AsyncSession, id_or_name: str) -> Tenant | None:
    """The tenant with this id, else with this name (operators name tenants either way); the
    transaction is scoped to it."""
    tenant = await tenants.find_tenant(session, id_or_name)
    if tenant is not None:
        await tenancy.set_tenant(session, tenant.id)
    return tenant


def unknown_key(presented: str) -> MoatError:
    """The 401 of a key that authenticates no one: it names the key's public prefix
    (``moat_<id>_``), never its secret, so the caller can tell which key it sent."""
    parts = presented.split("_", 2)
    if len(parts) != 3 or parts[0] != api_keys.API_KEY_PREFIX or not parts[1]:
        return MoatError(
            ErrorCode.UNAUTHENTICATED,
            "The API key is malformed: an API key reads moat_<id>_<secret>.",
        )
    prefix = api_keys.key_prefix(parts[1][:64])
    return MoatError(
        ErrorCode.UNAUTHENTICATED,
        f"The API key {prefix}… is unknown or revoked.",
        {"key_prefix": prefix},
    )


async def whoami(session: AsyncSession, caller: api_keys.AuthenticatedTenant) -> WhoAmI:
    """The caller's tenant (id and name) and key, in its tenant-scoped transaction."""
    tenant = await tenants.get_tenant(session, caller.tenant_id)
    return WhoAmI(
        tenant_id=caller.tenant_id,
        tenant_name=tenant.name if tenant is not None else "",
        key_id=caller.key_id,
        key_prefix=api_keys.key_prefix(caller.key_id),
        scopes=list(caller.scopes),
    )


def tenant_info(tenant: Tenant) -> TenantInfo:
    return tenants.to_tenant_info(tenant)


def allow_list(hosts: list[str]) -> list[str]:
    """``host`` or ``host:port`` entries in stored form, duplicates dropped.
    ``MoatError("schema_validation_failed")`` names an entry that is not one."""
    try:
        return normalize_allow_list(hosts)
    except ValueError as err:
        raise MoatError(ErrorCode.SCHEMA_VALIDATION_FAILED, str(err)) from err


async def set_allow_hosts(session: AsyncSession, tenant: Tenant, hosts: list[str]) -> TenantInfo:
    """Replace the tenant's http.request allow-list with ``hosts`` (see ``allow_list``).
    Only the owner role may write the list."""
    updated = await tenants.set_http_allow_hosts(session, tenant.id, allow_list(hosts))
    assert updated is not None
    return tenants.to_tenant_info(updated)


async def set_allow_bypass(session: AsyncSession, tenant: Tenant, allowed: bool) -> None:
    """Whether the tenant may set policy mode ``bypass``. Only the owner role may write it."""
    tenant.allow_bypass = allowed
    await session.flush()


async def create_key(
    session: AsyncSession,
    tenant_id: str,
    name: str = "",
    scopes: Sequence[str] = DEFAULT_SCOPES,
) -> NewApiKey:
    """A new API key of a tenant (the transaction's) with ``scopes``; its secret is in this
    answer only. ``MoatError("schema_validation_failed")`` names a scope that is not one."""
    bad = [s for s in scopes if not valid_scope(s)]
    if bad or not scopes:
        raise MoatError(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            f"Not scopes: {bad!r}. A scope is `<area>:<name>` such as `execute:*`, "
            "`execute:http.request` or `connections:write`."
            if bad
            else "A key needs at least one scope, e.g. `execute:*`.",
        )
    unique = list(dict.fromkeys(scopes))
    key, secret = await api_keys.issue_api_key(session, tenant_id, name, unique)
    return api_keys.to_new_key(key, secret)


async def list_keys(
    session: AsyncSession, tenant_id: str, after: Key | None = None, limit: int | None = None
) -> Sequence[ApiKeyInfo]:
    """A tenant's API keys, never their secrets."""
    rows = await api_keys.list_api_keys(session, tenant_id, after, limit)
    return [api_keys.to_key_info(k) for k in rows]


def key_id_of(key: str) -> str:
    """The id in a key's id, its public prefix ``moat_<id>_`` or the whole key."""
    if key.startswith(api_keys.API_KEY_PREFIX + "_"):
        return key.split("_")[1]
    return key


async def revoke_key(session: AsyncSession, key_id: str, now: datetime) -> ApiKeyInfo | None:
    """Revoke a key at ``now``, effective from the next request; revoking twice keeps the
    first time. None: no such key."""
    tenant_id = await api_keys.key_tenant(session, key_id)
    if tenant_id is None:
        return None
    await tenancy.set_tenant(session, tenant_id)
    revoked = await api_keys.revoke_api_key(session, key_id, now)
    return api_keys.to_key_info(revoked) if revoked is not None else None
