"""Ids given by their first characters, as git takes a commit's: the ids of a tenant's rows
that start with a prefix."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

# Shorter prefixes name no id (too easily several); at most this many candidates are listed.
MIN_PREFIX = 6
CANDIDATES = 5


def _like(prefix: str) -> str:
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


async def ids_starting(session: AsyncSession, model: Any, tenant_id: str, prefix: str) -> list[str]:
    """Up to ``CANDIDATES + 1`` ids of the tenant's ``model`` rows starting with ``prefix``,
    in order (more than one: the prefix is ambiguous); none for a prefix too short."""
    if len(prefix) < MIN_PREFIX:
        return []
    stmt = (
        select(model.id)
        .where(model.tenant_id == tenant_id, model.id.like(_like(prefix), escape="\\"))
        .order_by(model.id)
        .limit(CANDIDATES + 1)
    )
    return list((await session.execute(stmt)).scalars())
