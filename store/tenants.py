"""Tenants: creation, lookups across tenants (the operators' directory), the host allow-list."""

from __future__ import annotations

import secrets
import string
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession

from schemas.api import TenantInfo
from store.models import Tenant
from store.tenancy import set_tenant

_ID_ALPHABET = string.ascii_lowercase + string.digits


def _new_tenant_id() -> str:
    return "ten_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(16))


async def create_tenant(
    session: AsyncSession,
    name: str,
    *,
    idempotency_ttl_seconds: int = 86400,
    policy_mode: str = "standard",
) -> Tenant:
    """Create a tenant; the rest of the transaction is scoped to it (``set_tenant``)."""
    tenant_id = _new_tenant_id()
    await set_tenant(session, tenant_id)
    # ``allow_bypass`` is left to the column default: only the owner role may set it.
    tenant = Tenant(
        id=tenant_id,
        name=name,
        policy_mode=policy_mode,
        idempotency_ttl_seconds=idempotency_ttl_seconds,
    )
    session.add(tenant)
    await session.flush()
    return tenant


async def get_tenant(session: AsyncSession, tenant_id: str) -> Tenant | None:
    return await session.get(Tenant, tenant_id)


async def set_http_allow_hosts(
    session: AsyncSession, tenant_id: str, hosts: list[str]
) -> Tenant | None:
    """Replace a tenant's allow-list (entries already normalized); None for no such tenant.
    Only the owner role may write the column: the application role's UPDATE is refused."""
    tenant = await get_tenant(session, tenant_id)
    if tenant is not None:
        tenant.http_allow_hosts = hosts
        await session.flush()
    return tenant


async def tenant_ids(session: AsyncSession) -> list[str]:
    """Every tenant's id, oldest first (through the operators' directory)."""
    return [t.id for t in await list_tenants(session)]


async def list_tenants(
    session: AsyncSession, after: tuple[Any, ...] | None = None, limit: int | None = None
) -> Sequence[Tenant]:
    """The tenants, oldest first (after ``after``: created_at and id; at most ``limit``): the
    operators' directory across tenants, read through ``moat_list_tenants()`` (row-level
    security keeps the table itself closed)."""
    sql = "SELECT * FROM moat_list_tenants() t"
    params: dict[str, Any] = {}
    if after is not None:
        sql += " WHERE (t.created_at, t.id) > (:after_at, :after_id)"
        params.update(after_at=after[0], after_id=after[1])
    sql += " ORDER BY t.created_at, t.id"
    if limit is not None:
        sql += " LIMIT :limit"
        params["limit"] = limit
    stmt = select(Tenant).from_statement(text(sql).bindparams(**params))
    return (await session.execute(stmt)).scalars().all()


async def find_tenant(session: AsyncSession, id_or_name: str) -> Tenant | None:
    """The tenant with this id, else with this name (an operator's lookup across tenants)."""
    tenants = await list_tenants(session)
    by_id = next((t for t in tenants if t.id == id_or_name), None)
    return by_id or next((t for t in tenants if t.name == id_or_name), None)


def to_tenant_info(row: Tenant) -> TenantInfo:
    return TenantInfo.model_validate(row, from_attributes=True)
