"""``moat api-key``: a tenant's API keys (``moat_<id>_<secret>``, stored hashed): create,
list, revoke. ``moat key`` is a hidden alias, kept for one release."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.table import Table

from schemas.api import ApiKeyInfo, NewApiKey
from schemas.errors import ErrorCode
from schemas.scopes import DEFAULT_SCOPES
from schemas.settings import MoatSettings
from starter.cli.identity import AsOperator
from starter.cli.output import AsJson, out, print_json, run
from starter.cli.tenants import TenantArg, tenant_of
from starter.devstack.ports import local_settings
from starter.runtime.database import owner_transaction
from starter.service import MoatError, tenants

api_key_app = typer.Typer(
    no_args_is_help=True, help="API keys (moat_<id>_<secret>, stored hashed)."
)


async def _create(
    settings: MoatSettings, tenant: str, name: str, scopes: Sequence[str]
) -> NewApiKey:
    async with owner_transaction(settings) as session:
        row = await tenant_of(session, tenant)
        return await tenants.create_key(session, row.id, name, scopes)


@api_key_app.command("create", cls=AsOperator)
def create(
    tenant: TenantArg,
    name: Annotated[str, typer.Option("--name", help="A label, e.g. the agent using it.")] = "",
    scope: Annotated[
        list[str] | None,
        typer.Option(
            "--scope",
            help="What the key may do; repeat for several (default: execute:* and "
            "outputs:read). E.g. execute:http.request, connections:write.",
        ),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Create an API key for a tenant (the secret is shown once)."""
    created = run(_create(local_settings(), tenant, name, scope or DEFAULT_SCOPES))
    if as_json:
        out.print_json(created.model_dump_json())
        return
    table = Table(show_header=False)
    table.add_row("key_id", created.id)
    table.add_row("tenant_id", created.tenant_id)
    table.add_row("scopes", " ".join(created.scopes))
    table.add_row("api_key", created.api_key)
    out.print(table)
    out.print("[yellow]The API key is shown once; store it now.[/]")


async def _list(settings: MoatSettings, tenant: str) -> Sequence[ApiKeyInfo]:
    async with owner_transaction(settings) as session:
        row = await tenant_of(session, tenant)
        return await tenants.list_keys(session, row.id)


@api_key_app.command("list", cls=AsOperator)
def list_(tenant: TenantArg, as_json: AsJson = False) -> None:
    """List a tenant's API keys (ids and prefixes, never secrets)."""
    keys = run(_list(local_settings(), tenant))
    if as_json:
        print_json([k.model_dump(mode="json") for k in keys])
        return
    table = Table("name", "scopes", "created", "revoked")
    table.add_column("key id", no_wrap=True)
    for k in keys:
        revoked = f"{k.revoked_at:%F %T}" if k.revoked_at else ""
        table.add_row(k.name, " ".join(k.scopes), f"{k.created_at:%F %T}", revoked, k.id)
    out.print(table)


async def _revoke(settings: MoatSettings, key: str) -> ApiKeyInfo:
    key_id = tenants.key_id_of(key)
    async with owner_transaction(settings) as session:
        revoked = await tenants.revoke_key(session, key_id, datetime.now(UTC))
    if revoked is None:
        raise MoatError(ErrorCode.KEY_NOT_FOUND, f"no API key {key_id!r}")
    return revoked


@api_key_app.command("revoke", cls=AsOperator)
def revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id (the <id> in moat_<id>_…).")],
) -> None:
    """Revoke an API key; requests with it are refused from now on."""
    revoked = run(_revoke(local_settings(), key_id))
    assert revoked.revoked_at is not None
    out.print(f"key {revoked.id} of {revoked.tenant_id} revoked at {revoked.revoked_at:%F %T%z}")
