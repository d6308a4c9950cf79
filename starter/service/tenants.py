"""Administrative set-up shared by the CLI and ``moat up``: migrations, tenants, keys."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncSession

from schemas.api import ApiKeyInfo, BudgetInfo, NewApiKey, TenantInfo
from schemas.hosts import normalize_allow_list
from schemas.settings import APP_DATABASE_ROLE, OWNER_DATABASE_ROLE, MoatSettings
from store import api_keys, budgets, make_engine, make_sessionmaker, tenancy, tenants, upgrade
from store.models import Tenant

DEMO_TENANT = "demo"
DEMO_KEY_FILE = "demo_api_key"
ADMIN_KEY_FILE = "admin_api_key"


def migrate(settings: MoatSettings) -> None:
    upgrade(settings.sqlalchemy_url)


@dataclass(frozen=True)
class NewTenant:
    tenant_id: str
    api_key: str


@asynccontextmanager
async def _transaction(settings: MoatSettings) -> AsyncIterator[AsyncSession]:
    """One transaction as the owner role (operator commands)."""
    engine = make_engine(settings.sqlalchemy_url, pool_size=1)
    try:
        async with make_sessionmaker(engine).begin() as session:
            yield session
    finally:
        await engine.dispose()


async def _tenant(session: AsyncSession, tenant: str) -> Tenant:
    """The tenant with this id or name; the transaction is scoped to it."""
    row = await tenants.find_tenant(session, tenant)
    if row is None:
        raise ValueError(f"no tenant {tenant!r} (give its id or name; see `moat tenant list`)")
    await tenancy.set_tenant(session, row.id)
    return row


async def create_tenant(settings: MoatSettings, name: str) -> NewTenant:
    async with _transaction(settings) as session:
        if any(t.name == name for t in await tenants.list_tenants(session)):
            raise ValueError(f"a tenant named {name!r} already exists")
        tenant = await tenants.create_tenant(
            session, name, idempotency_ttl_seconds=settings.idempotency_ttl_seconds
        )
        key = await api_keys.create_api_key(session, tenant.id, name="initial")
    return NewTenant(tenant.id, key)


async def list_tenants(settings: MoatSettings) -> list[TenantInfo]:
    async with _transaction(settings) as session:
        return [tenants.to_tenant_info(t) for t in await tenants.list_tenants(session)]


async def set_allow_hosts(
    settings: MoatSettings, tenant: str, hosts: list[str] | None
) -> TenantInfo:
    """Replace a tenant's (id or name) http.request allow-list with ``hosts``; None leaves
    it as it is. ValueError names an entry that is not host[:port]."""
    entries = None if hosts is None else normalize_allow_list(hosts)
    async with _transaction(settings) as session:
        row = await _tenant(session, tenant)
        if entries is not None:
            await tenants.set_http_allow_hosts(session, row.id, entries)
        return tenants.to_tenant_info(row)


async def create_key(settings: MoatSettings, tenant: str, name: str = "") -> NewApiKey:
    """A new API key for a tenant (id or name); its secret is in the answer only."""
    async with _transaction(settings) as session:
        row = await _tenant(session, tenant)
        key, secret = await api_keys.issue_api_key(session, row.id, name)
    return api_keys.to_new_key(key, secret)


async def list_keys(settings: MoatSettings, tenant: str) -> list[ApiKeyInfo]:
    async with _transaction(settings) as session:
        row = await _tenant(session, tenant)
        return [api_keys.to_key_info(k) for k in await api_keys.list_api_keys(session, row.id)]


async def revoke_key(settings: MoatSettings, key: str) -> ApiKeyInfo:
    """Revoke a key, effective at once. ``key`` is its id, its prefix ``moat_<id>_`` or the
    whole key."""
    key_id = key.split("_")[1] if key.startswith(api_keys.API_KEY_PREFIX + "_") else key
    async with _transaction(settings) as session:
        tenant_id = await api_keys.key_tenant(session, key_id)
        if tenant_id is None:
            raise ValueError(f"no API key {key_id!r} (see `moat key list TENANT`)")
        await tenancy.set_tenant(session, tenant_id)
        revoked = await api_keys.revoke_api_key(session, key_id, datetime.now(UTC))
        assert revoked is not None
        return api_keys.to_key_info(revoked)


async def set_budget(
    settings: MoatSettings, tenant: str, capability_id: str, limit: int, period: str
) -> str:
    """Set a budget; ``tenant`` is an id or a name. Returns the tenant id."""
    async with _transaction(settings) as session:
        row = await _tenant(session, tenant)
        await budgets.set_budget(session, row.id, capability_id, limit, period)
        return row.id


async def list_budgets(settings: MoatSettings, tenant: str) -> tuple[str, list[BudgetInfo]]:
    """A tenant's budgets and where each stands this period; the tenant id first."""
    async with _transaction(settings) as session:
        row = await _tenant(session, tenant)
        states = await budgets.list_budgets(session, row.id, datetime.now(UTC))
    return row.id, [
        BudgetInfo(
            capability_id=capability_id,
            limit=state.limit,
            period=state.period,
            period_start=state.period_start,
            used=state.used,
            in_flight=state.held,
        )
        for capability_id, state in states
    ]


async def _ensure_demo_tenant(settings: MoatSettings) -> str:
    path = settings.home / DEMO_KEY_FILE
    async with _transaction(settings) as session:
        if path.exists():
            key = path.read_text().strip()
            if await api_keys.authenticate(session, key) is not None:
                return key
        tenant = await tenants.find_tenant(session, DEMO_TENANT)
        if tenant is None:
            tenant = await tenants.create_tenant(
                session, DEMO_TENANT, idempotency_ttl_seconds=settings.idempotency_ttl_seconds
            )
        await tenancy.set_tenant(session, tenant.id)
        key = await api_keys.create_api_key(session, tenant.id, name="moat up")
    _write_private(path, key, replace=True)
    return key


def ensure_demo_tenant(settings: MoatSettings) -> str:
    """The demo tenant's API key, created on first use and kept in ``$MOAT_HOME``."""
    return asyncio.run(_ensure_demo_tenant(settings))


def admin_key(settings: MoatSettings) -> str | None:
    """The admin key: the configured one, else the one ``moat up`` keeps in ``$MOAT_HOME``."""
    if settings.admin_api_key is not None:
        return settings.admin_api_key.get_secret_value()
    path = settings.home / ADMIN_KEY_FILE
    return path.read_text().strip() if path.exists() else None


def ensure_admin_key(settings: MoatSettings) -> str:
    """The admin key of the local stack, generated on first use and kept (mode 0600) in
    ``$MOAT_HOME`` when none is configured."""
    key = admin_key(settings)
    if key is None:
        key = "moat_admin_" + secrets.token_urlsafe(32)
        _write_private(settings.home / ADMIN_KEY_FILE, key, replace=False)
    return key


def ensure_database_passwords(settings: MoatSettings) -> dict[str, str]:
    """The embedded Postgres's role passwords (owner and application role), generated on
    first use and kept (mode 0600) in ``$MOAT_HOME``."""
    roles = (OWNER_DATABASE_ROLE, APP_DATABASE_ROLE)
    known = {role: settings.embedded_database_password(role) for role in roles}
    if all(known.values()):
        return {role: password for role, password in known.items() if password}
    passwords = {role: known[role] or secrets.token_urlsafe(32) for role in roles}
    _write_private(settings.database_passwords_path, json.dumps(passwords), replace=True)
    return passwords


def _write_private(path: Path, secret: str, *, replace: bool) -> None:
    """A secret file readable by its owner only (mode 0600 from its creation)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if replace else os.O_EXCL)
    with os.fdopen(os.open(path, flags, 0o600), "w") as fh:
        fh.write(secret + "\n")


def demo_api_key(settings: MoatSettings) -> str | None:
    path = settings.home / DEMO_KEY_FILE
    return path.read_text().strip() if path.exists() else None
