"""Plans (table ``plans``): one row per plan, claimed by its key; the caller has named
the tenant (``tenancy.set_tenant``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from store.db import table_of
from store.models import PlanRow
from store.pages import keyset

PLANS = table_of(PlanRow)


async def claim(session: AsyncSession, row: PlanRow) -> PlanRow:
    """The plan holding ``row``'s key: ``row``, inserted now, or the one that took the key
    first (compare its ``plan_hash``). A plan without a key (a dry run) is always new; a
    plan id already stored (a retried step) is found."""
    values = {c.name: getattr(row, c.key) for c in PlanRow.__table__.columns}
    values = {k: v for k, v in values.items() if v is not None}
    statement = insert(PLANS).values(**values)
    if row.idempotency_key is not None:
        statement = statement.on_conflict_do_nothing(
            index_elements=["tenant_id", "idempotency_key"],
            index_where=PLANS.c.idempotency_key.is_not(None),
        )
    else:
        statement = statement.on_conflict_do_nothing(index_elements=["id"])
    await session.execute(statement)
    if row.idempotency_key is not None:
        found = await by_key(session, row.tenant_id, row.idempotency_key, lock=True)
    else:
        found = await get(session, row.tenant_id, row.id, lock=True)
    assert found is not None
    return found


async def get(
    session: AsyncSession, tenant_id: str, plan_id: str, *, lock: bool = False
) -> PlanRow | None:
    query = select(PlanRow).where(PlanRow.tenant_id == tenant_id, PlanRow.id == plan_id)
    if lock:
        query = query.with_for_update()
    found: PlanRow | None = await session.scalar(query.execution_options(populate_existing=True))
    return found


async def by_key(
    session: AsyncSession, tenant_id: str, key: str, *, lock: bool = False
) -> PlanRow | None:
    query = select(PlanRow).where(PlanRow.tenant_id == tenant_id, PlanRow.idempotency_key == key)
    if lock:
        query = query.with_for_update()
    found: PlanRow | None = await session.scalar(query.execution_options(populate_existing=True))
    return found


async def save(
    session: AsyncSession,
    row: PlanRow,
    *,
    status: str,
    steps: Sequence[dict[str, Any]],
    run_id: str,
    error: dict[str, Any] | None,
    approval_id: str | None = None,
) -> None:
    """Where the plan stands after a step or at its end."""
    row.status = status
    row.steps = list(steps)
    row.run_id = run_id
    row.error = error
    if approval_id is not None:
        row.approval_id = approval_id
    now = await session.scalar(select(func.now()))
    assert isinstance(now, datetime)
    row.updated_at = now
    await session.flush()


async def add_resume(session: AsyncSession, row: PlanRow, entry: dict[str, Any]) -> None:
    """An operator's resume, kept with who stated what and when."""
    row.resumes = [*row.resumes, entry]
    await session.flush()


async def newest(
    session: AsyncSession,
    tenant_id: str,
    status: str | None,
    limit: int,
    after: tuple[Any, ...] | None = None,
) -> list[PlanRow]:
    """The tenant's plans, newest first (``after``: the sort key to start after)."""
    query = select(PlanRow).where(PlanRow.tenant_id == tenant_id)
    if status is not None:
        query = query.where(PlanRow.status == status)
    query = keyset(query, (PlanRow.created_at, PlanRow.id), after, limit, newest_first=True)
    return list((await session.scalars(query)).all())
