"""Ids as git takes commits: a whole id, or a prefix of at least ``MIN_PREFIX`` characters
that starts exactly one id of the tenant's rows of its kind."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from schemas.errors import ErrorCode
from starter.service.errors import MoatError
from store.prefixes import CANDIDATES, MIN_PREFIX, ids_starting

__all__ = ["MIN_PREFIX", "unique_id"]


async def unique_id(
    session: AsyncSession, model: Any, tenant_id: str, prefix: str, kind: str
) -> str | None:
    """The one id of the tenant's ``model`` rows ``prefix`` starts; None when none does (or
    the prefix is shorter than ``MIN_PREFIX``). Several: ``id_ambiguous``, naming them."""
    found = await ids_starting(session, model, tenant_id, prefix)
    if len(found) <= 1:
        return found[0] if found else None
    listed = ", ".join(found[:CANDIDATES]) + (", …" if len(found) > CANDIDATES else "")
    raise MoatError(
        ErrorCode.ID_AMBIGUOUS,
        f"{prefix[:80]!r} starts more than one {kind} id: {listed}; give more characters.",
        {"candidates": found[:CANDIDATES]},
    )
