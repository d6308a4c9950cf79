"""Budgets per tenant and capability: limits, successes counted per period, and the units
held by executions in flight."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from sqlalchemy import (
    CTE,
    Boolean,
    Date,
    DateTime,
    Select,
    and_,
    bindparam,
    case,
    delete,
    func,
    literal,
    select,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from store.db import DriverStatement, table_of
from store.models import Budget, BudgetHold, BudgetUsage


def period_start(period: str, now: datetime) -> date:
    today = now.date()
    return today.replace(day=1) if period == "month" else today


async def set_budget(
    session: AsyncSession, tenant_id: str, capability_id: str, limit: int, period: str
) -> None:
    stmt = insert(Budget).values(
        tenant_id=tenant_id, capability_id=capability_id, limit=limit, period=period
    )
    stmt = stmt.on_conflict_do_update(
        index_elements=[Budget.tenant_id, Budget.capability_id],
        set_={
            "limit": stmt.excluded.limit,
            "period": stmt.excluded.period,
            "updated_at": func.now(),
        },
    )
    await session.execute(stmt)


@dataclass(frozen=True)
class BudgetState:
    limit: int
    period: str
    period_start: date
    used: int
    held: int = 0  # executions allowed and not recorded yet
    # False: ``used`` and ``held`` not read (``uncounted``); what is decided against it
    # is committed only with ``guard``, which fails when the budget is used up.
    counted: bool = True

    @property
    def exhausted(self) -> bool:
        return self.counted and self.used + self.held >= self.limit


def uncounted(limit: int, period: str, now: datetime) -> BudgetState:
    """A budget whose row the transaction has locked, its uses and holds not read yet."""
    start = period_start(period, now)
    return BudgetState(limit=limit, period=period, period_start=start, used=0, counted=False)


async def budget_state(
    session: AsyncSession,
    tenant_id: str,
    capability_id: str,
    now: datetime,
    *,
    lock: bool = False,
    exclude_receipt: str | None = None,
) -> BudgetState | None:
    """The budget of a capability in the current period: successes counted, and units held
    by executions in flight (other than ``exclude_receipt``). ``lock`` takes the budget row
    FOR UPDATE, so concurrent checks of one budget see each other's holds."""
    query = select(Budget).where(
        Budget.tenant_id == tenant_id, Budget.capability_id == capability_id
    )
    budget = (
        await session.execute(query.with_for_update() if lock else query)
    ).scalar_one_or_none()
    if budget is None:
        return None
    return await _state_of(session, budget, now, exclude_receipt)


async def _state_of(
    session: AsyncSession, budget: Budget, now: datetime, exclude_receipt: str | None = None
) -> BudgetState:
    tenant_id, capability_id = budget.tenant_id, budget.capability_id
    start = period_start(budget.period, now)
    # Uses and holds in one statement, so one snapshot: the record step turns a hold into a
    # use in one transaction, and a check must never see neither (it would overshoot). The
    # snapshot is taken after the lock above was granted, so it sees every hold committed
    # by the checks this one waited for.
    used_query = (
        select(BudgetUsage.used)
        .where(
            BudgetUsage.tenant_id == tenant_id,
            BudgetUsage.capability_id == capability_id,
            BudgetUsage.period == budget.period,
            BudgetUsage.period_start == start,
        )
        .scalar_subquery()
    )
    holds = select(func.count()).where(
        BudgetHold.tenant_id == tenant_id,
        BudgetHold.capability_id == capability_id,
        BudgetHold.period == budget.period,
        BudgetHold.period_start == start,
        BudgetHold.expires_at > now,
    )
    if exclude_receipt is not None:
        holds = holds.where(BudgetHold.receipt_id != exclude_receipt)
    statement = select(func.coalesce(used_query, 0), holds.scalar_subquery())
    row = (await session.execute(statement)).one()
    return BudgetState(
        limit=budget.limit,
        period=budget.period,
        period_start=start,
        used=int(row[0]),
        held=int(row[1]),
    )


async def list_budgets(
    session: AsyncSession, tenant_id: str, now: datetime
) -> list[tuple[str, BudgetState]]:
    """Every budget of a tenant with its state in the current period, by capability."""
    budgets = (
        await session.execute(
            select(Budget).where(Budget.tenant_id == tenant_id).order_by(Budget.capability_id)
        )
    ).scalars()
    return [(b.capability_id, await _state_of(session, b, now)) for b in budgets.all()]


async def hold_budget(
    session: AsyncSession,
    tenant_id: str,
    capability_id: str,
    receipt_id: str,
    state: BudgetState,
    expires_at: datetime,
) -> None:
    """Hold one unit for an allowed execution (once: a retried check finds it there), and
    drop the budget's expired holds (left by runs that ended without recording)."""
    held = _hold(tenant_id, capability_id, receipt_id, state, expires_at)
    for stmt, params in zip(_HOLDING, held, strict=True):
        await session.execute(stmt, params)


def hold_statements(
    tenant_id: str,
    capability_id: str,
    receipt_id: str,
    state: BudgetState,
    expires_at: datetime,
) -> list[tuple[str, dict[str, Any]]]:
    """``hold_budget``'s statements as driver SQL (``store.db.pipelined_rows``)."""
    held = _hold(tenant_id, capability_id, receipt_id, state, expires_at)
    return [(d.sql, d.params(params)) for d, params in zip(_DRIVERS, held, strict=True)]


def _hold(
    tenant_id: str,
    capability_id: str,
    receipt_id: str,
    state: BudgetState,
    expires_at: datetime,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The parameters of ``hold_budget``'s statements (``_HOLDING``): the expired holds
    dropped, the unit held."""
    budget = {"tenant_id": tenant_id, "capability_id": capability_id}
    hold = {
        **budget,
        "receipt_id": receipt_id,
        "period": state.period,
        "period_start": state.period_start,
        "expires_at": expires_at,
    }
    return budget, hold


_BUDGETS = table_of(Budget)
_HOLDS = table_of(BudgetHold)
_USAGE = table_of(BudgetUsage)
_DROP_EXPIRED = delete(_HOLDS).where(
    _HOLDS.c.tenant_id == bindparam("tenant_id"),
    _HOLDS.c.capability_id == bindparam("capability_id"),
    _HOLDS.c.expires_at <= func.now(),
)
_HOLD = (
    insert(_HOLDS)
    .values(
        {
            c: bindparam(c)
            for c in (
                "tenant_id",
                "receipt_id",
                "capability_id",
                "period",
                "period_start",
                "expires_at",
            )
        }
    )
    .on_conflict_do_nothing()
)
# ``hold_budget``'s statements, in order, and as driver SQL.
_HOLDING = (_DROP_EXPIRED, _HOLD)
_DRIVERS = tuple(DriverStatement(stmt) for stmt in _HOLDING)


def _locked_state() -> tuple[Select[Any], Select[Any]]:
    """The state of a budget whose row the transaction has locked (``BUDGET_LOCK``), read
    in a statement of its own after the lock's: its snapshot is taken once the lock was
    granted, so it sees every hold committed by the checks this one waited for. Uses and
    holds in one statement, as ``budget_state`` reads them. Then the guard of a decision
    taken against an ``uncounted`` budget: an error ``USED_UP`` (a logarithm of zero) when
    it is used up, else a row."""
    start = case(
        (_BUDGETS.c.period == "month", bindparam("month_start", type_=Date)),
        else_=bindparam("day_start", type_=Date),
    )
    used = (
        select(_USAGE.c.used)
        .where(
            _USAGE.c.tenant_id == _BUDGETS.c.tenant_id,
            _USAGE.c.capability_id == _BUDGETS.c.capability_id,
            _USAGE.c.period == _BUDGETS.c.period,
            _USAGE.c.period_start == start,
        )
        .scalar_subquery()
    )
    held = (
        select(func.count())
        .select_from(_HOLDS)
        .where(
            _HOLDS.c.tenant_id == _BUDGETS.c.tenant_id,
            _HOLDS.c.capability_id == _BUDGETS.c.capability_id,
            _HOLDS.c.period == _BUDGETS.c.period,
            _HOLDS.c.period_start == start,
            _HOLDS.c.expires_at > bindparam("now", type_=DateTime(timezone=True)),
            _HOLDS.c.receipt_id != bindparam("exclude_receipt"),
        )
        .scalar_subquery()
    )
    budget = (
        _BUDGETS.c.tenant_id == bindparam("tenant_id"),
        _BUDGETS.c.capability_id == bindparam("capability_id"),
    )
    counted = func.coalesce(used, 0)
    state = select(_BUDGETS.c.limit, _BUDGETS.c.period, start, counted, held).where(*budget)
    left = case((counted + held < _BUDGETS.c.limit, 1), else_=0)
    return state, select(func.ln(left)).where(*budget)


# The SQLSTATE of ``guard``'s failure: invalid_argument_for_logarithm.
USED_UP = "2201E"


class UsedUp(Exception):
    """A ``guard`` failed: the budget decided against is used up, nothing was committed."""


_LOCKED_STATE, _GUARD = (DriverStatement(stmt) for stmt in _locked_state())


def _state_params(
    tenant_id: str, capability_id: str, now: datetime, exclude_receipt: str
) -> dict[str, Any]:
    return {
        "tenant_id": tenant_id,
        "capability_id": capability_id,
        "now": now,
        "exclude_receipt": exclude_receipt,
        "month_start": period_start("month", now),
        "day_start": period_start("day", now),
    }


def locked_state(
    tenant_id: str, capability_id: str, now: datetime, exclude_receipt: str
) -> tuple[str, dict[str, Any]]:
    """``budget_state``'s reading of a budget the transaction has locked, as driver SQL
    (``store.db.pipelined``) to send after the lock's statement: a row for ``state_of``
    when the capability has a budget."""
    params = _state_params(tenant_id, capability_id, now, exclude_receipt)
    return _LOCKED_STATE.sql, _LOCKED_STATE.params(params)


def guard(
    tenant_id: str, capability_id: str, now: datetime, exclude_receipt: str
) -> tuple[str, dict[str, Any]]:
    """A statement (driver SQL, for ``store.db.pipelined_rows``) sent after the lock's, in
    the transaction that decides against an ``uncounted`` budget, before what it writes:
    it fails with the SQLSTATE ``USED_UP`` when the budget is used up (its uses and the
    holds of executions other than ``exclude_receipt``), so that nothing after it runs."""
    params = _state_params(tenant_id, capability_id, now, exclude_receipt)
    return _GUARD.sql, _GUARD.params(params)


def state_of(row: tuple[Any, ...] | None) -> BudgetState | None:
    """The state a ``locked_state`` row gives (None: the capability has no budget)."""
    if row is None:
        return None
    limit, period, start, used, held = row
    return BudgetState(
        limit=int(limit), period=period, period_start=start, used=int(used), held=int(held)
    )


def used_with(new: CTE) -> CTE:
    """A success counted against its capability's budget, if one is set, as a CTE of the
    statement that writes its receipt (``new``: the CTE of the receipt's INSERT, returning
    its ``tenant_id`` and ``capability_id``): only when the receipt was inserted and
    ``budget_use`` is true. It reads the budget's period and adds one to the usage row of
    the period's start (``month_start`` for a monthly budget, else ``day_start``). Its
    parameters: ``use_params``."""
    budget = (
        select(
            _BUDGETS.c.tenant_id,
            _BUDGETS.c.capability_id,
            _BUDGETS.c.period,
            case(
                (_BUDGETS.c.period == "month", bindparam("month_start", type_=Date)),
                else_=bindparam("day_start", type_=Date),
            ),
            literal(1),
        )
        .select_from(new)
        .join(
            _BUDGETS,
            and_(
                _BUDGETS.c.tenant_id == new.c.tenant_id,
                _BUDGETS.c.capability_id == new.c.capability_id,
            ),
        )
        .where(bindparam("budget_use", type_=Boolean))
    )
    columns = ["tenant_id", "capability_id", "period", "period_start", "used"]
    stmt = insert(_USAGE).from_select(columns, budget)
    return stmt.on_conflict_do_update(
        index_elements=[
            _USAGE.c.tenant_id,
            _USAGE.c.capability_id,
            _USAGE.c.period,
            _USAGE.c.period_start,
        ],
        set_={"used": _USAGE.c.used + 1},
    ).cte("budget_used")


def released_with(new: CTE) -> CTE:
    """The unit the policy step held for the receipt ``new`` inserted, given back (it is
    used, or the call took no effect), as a CTE of the receipt's statement: only when the
    receipt was inserted and ``budget_release`` is true."""
    return (
        delete(_HOLDS)
        .where(
            _HOLDS.c.tenant_id == new.c.tenant_id,
            _HOLDS.c.receipt_id == new.c.id,
            bindparam("budget_release", type_=Boolean),
        )
        .cte("budget_released")
    )


def use_params(*, use: bool, release: bool, now: datetime) -> dict[str, Any]:
    """The parameters of ``used_with`` and ``released_with``: count a use (a success) and
    give back the unit held, at ``now``."""
    return {
        "budget_use": use,
        "budget_release": release,
        "month_start": period_start("month", now),
        "day_start": period_start("day", now),
    }
