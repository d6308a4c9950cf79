"""A tenant's policy documents: one write-once row per version, numbered 1, 2, … per tenant."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import bindparam, func, select, text, true
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from schemas.policy import PolicyVersion
from schemas.records import PolicyMode
from store import held
from store.db import table_of
from store.held import HeldReads
from store.models import PolicyVersionRow, Tenant
from store.pages import keyset


async def latest(session: AsyncSession, tenant_id: str) -> PolicyVersionRow | None:
    stmt = (
        select(PolicyVersionRow)
        .where(PolicyVersionRow.tenant_id == tenant_id)
        .order_by(PolicyVersionRow.version.desc())
        .limit(1)
    )
    return (await session.execute(stmt)).scalar_one_or_none()


# ``latest``'s mode alone, as a held read (``store.held``): one statement, no document.
_HELD_LATEST_MODE = (
    f"SELECT {held.SCOPE}, (SELECT mode FROM policy_versions WHERE tenant_id = %(tenant)s"
    " ORDER BY version DESC LIMIT 1)"
)


async def latest_mode_held(reads: HeldReads, tenant_id: str) -> tuple[str | None] | None:
    """The mode of the tenant's current document (None in the tuple: it has none), read in
    one statement on a connection held scoped to the tenant; None when not read there (no
    held connection free): read ``latest`` in a transaction."""
    row = await reads.read(tenant_id, _HELD_LATEST_MODE, {"tenant": tenant_id})
    return None if row is None else (row[1],)


async def latest_version(session: AsyncSession, tenant_id: str) -> int:
    """The number of the tenant's current document; 0 when it has none."""
    stmt = select(func.coalesce(func.max(PolicyVersionRow.version), 0)).where(
        PolicyVersionRow.tenant_id == tenant_id
    )
    return int((await session.execute(stmt)).scalar_one())


async def get(session: AsyncSession, tenant_id: str, version: int) -> PolicyVersionRow | None:
    return await session.get(PolicyVersionRow, (tenant_id, version))


async def history(
    session: AsyncSession,
    tenant_id: str,
    after: tuple[Any, ...] | None = None,
    limit: int | None = None,
) -> Sequence[PolicyVersionRow]:
    """Newest first (after ``after``: a version number, at most ``limit``)."""
    stmt = select(PolicyVersionRow).where(PolicyVersionRow.tenant_id == tenant_id)
    stmt = keyset(stmt, (PolicyVersionRow.version,), after, limit, newest_first=True)
    return (await session.execute(stmt)).scalars().all()


async def add(
    session: AsyncSession, tenant_id: str, mode: str, document: dict[str, Any], created_by: str
) -> PolicyVersionRow:
    """Store the next version. Concurrent writers of one tenant queue on a transaction-scoped
    advisory lock, so each gets its own number and none is lost."""
    await session.execute(
        text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"),
        {"k": f"moat.policy:{tenant_id}"},
    )
    row = PolicyVersionRow(
        tenant_id=tenant_id,
        version=await latest_version(session, tenant_id) + 1,
        mode=mode,
        document=document,
        created_by=created_by,
    )
    session.add(row)
    await session.flush()
    await session.refresh(row)
    return row


def to_version(row: PolicyVersionRow) -> PolicyVersion:
    return PolicyVersion.model_validate(
        {
            **row.document,
            "version": row.version,
            "created_at": row.created_at,
            "created_by": row.created_by,
        }
    )


async def current(session: AsyncSession, tenant_id: str, tenant: Tenant | None) -> PolicyVersion:
    """The tenant's current policy document; version 0 (its mode, no rules) before it has
    one."""
    return _document(await latest(session, tenant_id), tenant)


def _document(row: PolicyVersionRow | None, tenant: Tenant | None) -> PolicyVersion:
    if row is not None:
        return to_version(row)
    mode = PolicyMode(tenant.policy_mode) if tenant else PolicyMode.STANDARD
    return PolicyVersion(mode=mode, version=0)


# The tenant with its latest document, if it has one (a document names an existing tenant).
_LATEST = (
    select(PolicyVersionRow)
    .where(PolicyVersionRow.tenant_id == Tenant.id)
    .order_by(PolicyVersionRow.version.desc())
    .limit(1)
    .lateral("latest")
)
_LATEST_ROW = aliased(PolicyVersionRow, _LATEST)
_TENANT_AND_LATEST = (
    select(Tenant, _LATEST_ROW)
    .outerjoin(_LATEST_ROW, true())
    .where(Tenant.id == bindparam("tenant_id"))
)


async def tenant_and_current(
    session: AsyncSession, tenant_id: str
) -> tuple[Tenant | None, PolicyVersion]:
    """The tenant (None: no such tenant) and ``current``'s document, in one statement."""
    found = (await session.execute(_TENANT_AND_LATEST, {"tenant_id": tenant_id})).first()
    tenant, row = found if found is not None else (None, None)
    return tenant, _document(row, tenant)


_TENANT = [c.name for c in table_of(Tenant).c]
_VERSION = [c.name for c in table_of(PolicyVersionRow).c]
# ``tenant_and_current``'s statement as driver SQL (``store.db.pipelined``): the tenant's
# columns, then its latest document's (all NULL when it has none).
TENANT_AND_CURRENT = (
    "SELECT "
    + ", ".join([f"t.{c}" for c in _TENANT] + [f"v.{c}" for c in _VERSION])
    + " FROM tenants t LEFT JOIN LATERAL (SELECT * FROM policy_versions p"
    " WHERE p.tenant_id = t.id ORDER BY p.version DESC LIMIT 1) v ON true"
    " WHERE t.id = %(tenant_id)s"
)


def tenant_and_current_of(row: Sequence[Any] | None) -> tuple[Tenant | None, PolicyVersion]:
    """``tenant_and_current``'s answer from a ``TENANT_AND_CURRENT`` row (None: none came)."""
    if row is None:
        return None, _document(None, None)
    tenant = Tenant(**dict(zip(_TENANT, row[: len(_TENANT)], strict=True)))
    latest = row[len(_TENANT) :]
    version = PolicyVersionRow(**dict(zip(_VERSION, latest, strict=True)))
    return tenant, _document(version if latest[0] is not None else None, tenant)
