"""Administrative set-up shared by the CLI and ``moat up``: migrations, tenants, keys."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

from schemas.settings import MoatSettings
from store import make_engine, make_sessionmaker, upgrade
from store import repository as repo

DEMO_TENANT = "demo"
DEMO_KEY_FILE = "demo_api_key"


def migrate(settings: MoatSettings) -> None:
    upgrade(settings.sqlalchemy_url)


@dataclass(frozen=True)
class NewTenant:
    tenant_id: str
    api_key: str


async def create_tenant(settings: MoatSettings, name: str) -> NewTenant:
    engine = make_engine(settings.sqlalchemy_url, pool_size=1)
    try:
        async with make_sessionmaker(engine).begin() as session:
            if await repo.get_tenant_by_name(session, name) is not None:
                raise ValueError(f"a tenant named {name!r} already exists")
            tenant = await repo.create_tenant(
                session, name, idempotency_ttl_seconds=settings.idempotency_ttl_seconds
            )
            key = await repo.create_api_key(session, tenant.id, name="initial")
        return NewTenant(tenant.id, key)
    finally:
        await engine.dispose()


async def set_budget(
    settings: MoatSettings, tenant: str, capability_id: str, limit: int, period: str
) -> str:
    """Set a budget; ``tenant`` is an id or a name. Returns the tenant id."""
    engine = make_engine(settings.sqlalchemy_url, pool_size=1)
    try:
        async with make_sessionmaker(engine).begin() as session:
            row = await repo.get_tenant(session, tenant) or await repo.get_tenant_by_name(
                session, tenant
            )
            if row is None:
                raise ValueError(f"no tenant {tenant!r} (give its id or name)")
            await repo.set_budget(session, row.id, capability_id, limit, period)
            return row.id
    finally:
        await engine.dispose()


async def _ensure_demo_tenant(settings: MoatSettings) -> str:
    path = settings.home / DEMO_KEY_FILE
    engine = make_engine(settings.sqlalchemy_url, pool_size=1)
    try:
        async with make_sessionmaker(engine).begin() as session:
            if path.exists():
                key = path.read_text().strip()
                if await repo.authenticate(session, key) is not None:
                    return key
            tenant = await repo.get_tenant_by_name(session, DEMO_TENANT)
            if tenant is None:
                tenant = await repo.create_tenant(
                    session, DEMO_TENANT, idempotency_ttl_seconds=settings.idempotency_ttl_seconds
                )
            key = await repo.create_api_key(session, tenant.id, name="moat up")
    finally:
        await engine.dispose()
    settings.home.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(key + "\n")
    return key


def ensure_demo_tenant(settings: MoatSettings) -> str:
    """The demo tenant's API key, created on first use and kept in ``$MOAT_HOME``."""
    return asyncio.run(_ensure_demo_tenant(settings))


def demo_api_key(settings: MoatSettings) -> str | None:
    path = settings.home / DEMO_KEY_FILE
    return path.read_text().strip() if path.exists() else None
