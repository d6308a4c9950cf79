"""``moat budget``: how many successful executions of a capability a tenant may make per
period, and where each budget stands."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated

import typer
from rich.table import Table

from schemas.api import BudgetInfo
from schemas.settings import MoatSettings
from starter.cli.identity import AsOperator
from starter.cli.output import AsJson, out, print_json, run
from starter.cli.tenants import TenantArg, tenant_of
from starter.devstack.ports import local_settings
from starter.runtime.database import owner_transaction
from starter.service import budgets

budget_app = typer.Typer(no_args_is_help=True, help="Per-tenant, per-capability budgets.")


class Period(StrEnum):
    day = "day"
    month = "month"


async def _list(settings: MoatSettings, tenant: str) -> tuple[str, list[BudgetInfo]]:
    async with owner_transaction(settings) as session:
        row = await tenant_of(session, tenant)
        return row.id, await budgets.list_budgets(session, row.id, datetime.now(UTC))


@budget_app.command("list", cls=AsOperator)
def list_(tenant: TenantArg, as_json: AsJson = False) -> None:
    """A tenant's budgets: limit, successes used this period, executions in flight."""
    tenant_id, rows = run(_list(local_settings(), tenant))
    if as_json:
        print_json([b.model_dump(mode="json") for b in rows])
        return
    if not rows:
        out.print(f"{tenant_id} has no budgets: every capability is unlimited")
        return
    table = Table("capability", "limit", "period", "since", "used", "in flight", "left")
    for b in rows:
        table.add_row(
            b.capability_id,
            str(b.limit),
            b.period,
            f"{b.period_start:%F}",
            str(b.used),
            str(b.in_flight),
            str(max(0, b.limit - b.used - b.in_flight)),
        )
    out.print(table)


async def _set(
    settings: MoatSettings, tenant: str, capability_id: str, limit: int, period: str
) -> str:
    async with owner_transaction(settings) as session:
        row = await tenant_of(session, tenant)
        await budgets.set_budget(session, row.id, capability_id, limit, period)
        return row.id


@budget_app.command("set", cls=AsOperator)
def set_(
    tenant: TenantArg,
    capability: Annotated[str, typer.Argument(help="Capability id, e.g. http.request.")],
    limit: Annotated[int, typer.Argument(min=0, help="Successful executions per period.")],
    period: Annotated[Period, typer.Option(help="Budget period.")] = Period.day,
) -> None:
    """Set how many successful executions of a capability a tenant may make per period."""
    tenant_id = run(
        _set(local_settings(), tenant, capability, limit, period.value),
        hint="list tenants with `moat tenant list` or create one: moat tenant create NAME",
    )
    out.print(f"budget for {tenant_id} / {capability}: {limit} per {period.value}")
