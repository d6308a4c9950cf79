"""``moat tenant``: create tenants (with their first API key), list them, set the hosts a
tenant's http.request may call besides the public ones, show and set its quotas."""

from __future__ import annotations

from typing import Annotated

import typer
from pydantic import ValidationError
from rich.table import Table
from sqlalchemy.ext.asyncio import AsyncSession

from schemas.api import NewTenant, TenantInfo
from schemas.errors import ErrorCode
from schemas.quotas import Quota, QuotaUpdate, TenantQuotas
from schemas.settings import MoatSettings
from starter.cli.identity import AsOperator, tenant_source
from starter.cli.output import AsJson, out, print_json, run, usage
from starter.devstack.ports import local_settings
from starter.runtime.database import owner_transaction
from starter.service import MoatError, quotas, tenants
from store.models import Tenant

tenant_app = typer.Typer(no_args_is_help=True, help="Tenants.")

TenantArg = Annotated[str, typer.Argument(help="Tenant id or name.")]


async def tenant_of(session: AsyncSession, tenant: str, source: str = "") -> Tenant:
    """The tenant an operator named (id or name); the transaction is scoped to it. A name
    found nowhere is refused naming it and where it came from (``identity.tenant_source``)."""
    row = await tenants.find_tenant(session, tenant)
    if row is None:
        where = source or tenant_source()
        raise MoatError(
            ErrorCode.TENANT_NOT_FOUND,
            f"no tenant {tenant!r}" + (f" (from {where})" if where else ""),
            {"tenant": tenant},
        )
    return row


async def _create(settings: MoatSettings, name: str) -> NewTenant:
    async with owner_transaction(settings) as session:
        return await tenants.create_tenant(
            session, name, idempotency_ttl_seconds=settings.idempotency_ttl_seconds
        )


@tenant_app.command("create", cls=AsOperator)
def create(name: str, as_json: AsJson = False) -> None:
    """Create a tenant and its first API key (shown once)."""
    created = run(_create(local_settings(), name))
    tenant_id, api_key = created.tenant.id, created.api_key.api_key
    if as_json:
        print_json({"tenant_id": tenant_id, "api_key": api_key})
        return
    table = Table(show_header=False)
    table.add_row("tenant_id", tenant_id)
    table.add_row("api_key", api_key)
    out.print(table)
    out.print("[yellow]The API key is shown once; store it now.[/]")


async def _list(settings: MoatSettings) -> list[TenantInfo]:
    async with owner_transaction(settings) as session:
        return await tenants.list_tenants(session)


@tenant_app.command("list", cls=AsOperator)
def list_(as_json: AsJson = False) -> None:
    """List tenants."""
    rows = run(_list(local_settings()))
    if as_json:
        print_json([t.model_dump(mode="json") for t in rows])
        return
    table = Table("name", "policy", "TTL (s)", "created", "allowed hosts")
    table.add_column("id", no_wrap=True)
    for t in rows:
        table.add_row(
            t.name,
            t.policy_mode,
            str(t.idempotency_ttl_seconds),
            f"{t.created_at:%F}",
            ", ".join(t.http_allow_hosts),
            t.id,
        )
    out.print(table)


async def _allow_hosts(settings: MoatSettings, tenant: str, hosts: list[str] | None) -> TenantInfo:
    entries = None if hosts is None else tenants.allow_list(hosts)
    async with owner_transaction(settings) as session:
        row = await tenant_of(session, tenant)
        if entries is None:
            return tenants.tenant_info(row)
        return await tenants.set_allow_hosts(session, row, entries)


@tenant_app.command("allow-hosts", cls=AsOperator)
def allow_hosts(
    tenant: TenantArg,
    hosts: Annotated[
        list[str] | None,
        typer.Argument(
            help="host (ports 80 and 443 only) or host:port, IPv6 as [address]:port.",
            show_default=False,
        ),
    ] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Empty the tenant's list.")] = False,
    as_json: AsJson = False,
) -> None:
    """Set the non-public hosts a tenant's http.request may call, besides the worker's own
    list (MOAT_HTTP_ALLOW_HOSTS); the given entries replace the list. No entries: show it."""
    if clear and hosts:
        raise usage("give entries or --clear, not both", "see `moat tenant allow-hosts --help`")
    info = run(_allow_hosts(local_settings(), tenant, [] if clear else hosts))
    if as_json:
        print_json(info.http_allow_hosts)
        return
    listed = ", ".join(info.http_allow_hosts) or "none (public hosts only)"
    out.print(f"allowed hosts of {info.id}: {listed}", soft_wrap=True)


def _quota_changes(assignments: list[str], cleared: list[str]) -> QuotaUpdate:
    changes: dict[str, int | None] = {name: None for name in cleared}
    for item in assignments:
        name, sep, value = item.partition("=")
        if not sep or not value.strip().isdigit():
            raise usage(f"--set {item!r} is not QUOTA=N", "e.g. --set webhooks=50")
        changes[name.strip()] = int(value)
    unknown = sorted(set(changes) - {q.value for q in Quota})
    if unknown:
        known = ", ".join(q.value for q in Quota)
        raise usage(f"no quota {', '.join(unknown)}", f"quotas: {known}", code="no_such_quota")
    try:
        return QuotaUpdate.model_validate(changes)
    except ValidationError as err:
        raise usage(f"invalid limit: {err.errors()[0]['msg']}", "give a whole number") from None


async def _quotas(settings: MoatSettings, tenant: str, update: QuotaUpdate) -> TenantQuotas:
    async with owner_transaction(settings) as session:
        row = await tenant_of(session, tenant)
        return await quotas.update(session, settings.quota_limits, row.id, update)


@tenant_app.command("quotas", cls=AsOperator)
def quotas_(
    tenant: TenantArg,
    assignments: Annotated[
        list[str] | None,
        typer.Option(
            "--set", help="QUOTA=N: the tenant's own limit (repeatable).", show_default=False
        ),
    ] = None,
    cleared: Annotated[
        list[str] | None,
        typer.Option(
            "--clear", help="QUOTA: back to its default (repeatable).", show_default=False
        ),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Show a tenant's quotas (limit, where it comes from, usage), or set its own limits
    over the MOAT_QUOTA_* defaults. A limit below the usage refuses new creates only."""
    settings = local_settings()
    report = run(_quotas(settings, tenant, _quota_changes(assignments or [], cleared or [])))
    if as_json:
        print_json(report.model_dump(mode="json"))
        return
    table = Table("quota", "limit", "usage", "source", "counts")
    for state in report.quotas:
        table.add_row(
            state.quota.value, str(state.limit), str(state.usage), state.source, state.counts
        )
    out.print(table)
