"""The ``moat`` command line: run the stack, manage tenants and budgets, execute."""

from __future__ import annotations

import asyncio
import json
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from schemas.settings import MoatSettings
from starter.cli.manifests import keys_app, manifest_app
from starter.cli.runs import runs_app

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # locals may hold keys and secrets
    help="Moat: durable, idempotent execution of agents' side effects.",
)
tenant_app = typer.Typer(no_args_is_help=True, help="Tenants.")
key_app = typer.Typer(no_args_is_help=True, help="API keys (moat_<id>_<secret>, stored hashed).")
budget_app = typer.Typer(no_args_is_help=True, help="Per-tenant, per-capability budgets.")
codec_app = typer.Typer(
    no_args_is_help=True, help="The Temporal Web UI's codec address (decode only), rotated."
)
app.add_typer(tenant_app, name="tenant")
app.add_typer(key_app, name="key")
app.add_typer(budget_app, name="budget")
app.add_typer(codec_app, name="codec")
app.add_typer(runs_app, name="runs")
app.add_typer(manifest_app, name="manifest")
app.add_typer(keys_app, name="keys")

out = Console()
err = Console(stderr=True)


def _settings() -> MoatSettings:
    return MoatSettings()


def _fail(message: str, hint: str | None = None, code: int = 1) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}")
    if hint:
        err.print(f"[dim]{hint}[/]")
    return typer.Exit(code)


@app.command()
def up() -> None:
    """Run the whole stack on embedded defaults until Ctrl-C.

    Temporal dev server and its UI, PostgreSQL, migrations, one worker and the gateway."""
    from starter.devstack.up import run_up

    raise typer.Exit(run_up(_settings()))


@app.command()
def worker() -> None:
    """Run one Temporal worker against the configured Temporal and Postgres."""
    import worker as worker_module

    asyncio.run(worker_module.run(_settings()))


@app.command()
def gateway() -> None:
    """Run the HTTP gateway against the configured Temporal and Postgres.

    With MOAT_ADMIN_PORT set, the admin routes listen on that port only."""
    from starter.gateway.app import serve

    raise typer.Exit(asyncio.run(serve(_settings())))


@app.command()
def migrate() -> None:
    """Apply database migrations (as the owner role)."""
    from starter.service.tenants import migrate as run_migrations

    run_migrations(_settings())
    out.print("migrations applied")


@tenant_app.command("create")
def tenant_create(
    name: str,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Create a tenant and its first API key (shown once)."""
    from starter.service.tenants import create_tenant

    try:
        created = asyncio.run(create_tenant(_settings(), name))
    except ValueError as exc:
        raise _fail(str(exc)) from None
    if as_json:
        out.print_json(json.dumps({"tenant_id": created.tenant_id, "api_key": created.api_key}))
        return
    table = Table(show_header=False)
    table.add_row("tenant_id", created.tenant_id)
    table.add_row("api_key", created.api_key)
    out.print(table)
    out.print("[yellow]The API key is shown once; store it now.[/]")


@tenant_app.command("list")
def tenant_list(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """List tenants."""
    from starter.service.tenants import list_tenants

    tenants = asyncio.run(list_tenants(_settings()))
    if as_json:
        out.print_json(json.dumps([t.model_dump(mode="json") for t in tenants]))
        return
    table = Table("name", "policy", "TTL (s)", "created", "allowed hosts")
    table.add_column("id", no_wrap=True)
    for t in tenants:
        table.add_row(
            t.name,
            t.policy_mode,
            str(t.idempotency_ttl_seconds),
            f"{t.created_at:%F}",
            ", ".join(t.http_allow_hosts),
            t.id,
        )
    out.print(table)


@tenant_app.command("allow-hosts")
def tenant_allow_hosts(
    tenant: Annotated[str, typer.Argument(help="Tenant id or name.")],
    hosts: Annotated[
        list[str] | None,
        typer.Argument(
            help="host (ports 80 and 443 only) or host:port, IPv6 as [address]:port.",
            show_default=False,
        ),
    ] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Empty the tenant's list.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Set the non-public hosts a tenant's http.request may call, besides the worker's own
    list (MOAT_HTTP_ALLOW_HOSTS); the given entries replace the list. No entries: show it."""
    from starter.service.tenants import set_allow_hosts

    if clear and hosts:
        raise _fail("give entries or --clear, not both", code=2)
    try:
        info = asyncio.run(set_allow_hosts(_settings(), tenant, [] if clear else hosts))
    except ValueError as exc:
        raise _fail(str(exc)) from None
    if as_json:
        out.print_json(json.dumps(info.http_allow_hosts))
        return
    listed = ", ".join(info.http_allow_hosts) or "none (public hosts only)"
    out.print(f"allowed hosts of {info.id}: {listed}", soft_wrap=True)


@key_app.command("create")
def key_create(
    tenant: Annotated[str, typer.Argument(help="Tenant id or name.")],
    name: Annotated[str, typer.Option("--name", help="A label, e.g. the agent using it.")] = "",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Create an API key for a tenant (the secret is shown once)."""
    from starter.service.tenants import create_key

    try:
        created = asyncio.run(create_key(_settings(), tenant, name))
    except ValueError as exc:
        raise _fail(str(exc)) from None
    if as_json:
        out.print_json(created.model_dump_json())
        return
    table = Table(show_header=False)
    table.add_row("key_id", created.id)
    table.add_row("tenant_id", created.tenant_id)
    table.add_row("api_key", created.api_key)
    out.print(table)
    out.print("[yellow]The API key is shown once; store it now.[/]")


@key_app.command("list")
def key_list(
    tenant: Annotated[str, typer.Argument(help="Tenant id or name.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """List a tenant's API keys (ids and prefixes, never secrets)."""
    from starter.service.tenants import list_keys

    try:
        keys = asyncio.run(list_keys(_settings(), tenant))
    except ValueError as exc:
        raise _fail(str(exc)) from None
    if as_json:
        out.print_json(json.dumps([k.model_dump(mode="json") for k in keys]))
        return
    table = Table("name", "created", "revoked")
    table.add_column("key id", no_wrap=True)
    for k in keys:
        revoked = f"{k.revoked_at:%F %T}" if k.revoked_at else ""
        table.add_row(k.name, f"{k.created_at:%F %T}", revoked, k.id)
    out.print(table)


@key_app.command("revoke")
def key_revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id (the <id> in moat_<id>_…).")],
) -> None:
    """Revoke an API key; requests with it are refused from now on."""
    from starter.service.tenants import revoke_key

    try:
        revoked = asyncio.run(revoke_key(_settings(), key_id))
    except ValueError as exc:
        raise _fail(str(exc)) from None
    assert revoked.revoked_at is not None
    out.print(f"key {revoked.id} of {revoked.tenant_id} revoked at {revoked.revoked_at:%F %T%z}")


class Period(StrEnum):
    day = "day"
    month = "month"


@budget_app.command("list")
def budget_list(
    tenant: Annotated[str, typer.Argument(help="Tenant id or name.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """A tenant's budgets: limit, successes used this period, executions in flight."""
    from starter.service.tenants import list_budgets

    try:
        tenant_id, budgets = asyncio.run(list_budgets(_settings(), tenant))
    except ValueError as exc:
        raise _fail(str(exc)) from None
    if as_json:
        out.print_json(json.dumps([b.model_dump(mode="json") for b in budgets]))
        return
    if not budgets:
        out.print(f"{tenant_id} has no budgets: every capability is unlimited")
        return
    table = Table("capability", "limit", "period", "since", "used", "in flight", "left")
    for b in budgets:
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


@budget_app.command("set")
def budget_set(
    tenant: Annotated[str, typer.Argument(help="Tenant id or name.")],
    capability: Annotated[str, typer.Argument(help="Capability id, e.g. http.request.")],
    limit: Annotated[int, typer.Argument(min=0, help="Successful executions per period.")],
    period: Annotated[Period, typer.Option(help="Budget period.")] = Period.day,
) -> None:
    """Set how many successful executions of a capability a tenant may make per period."""
    from starter.service.tenants import set_budget

    try:
        tenant_id = asyncio.run(set_budget(_settings(), tenant, capability, limit, period.value))
    except ValueError as exc:
        raise _fail(
            str(exc), "list tenants with `moat tenant list` or create one: moat tenant create NAME"
        ) from None
    out.print(f"budget for {tenant_id} / {capability}: {limit} per {period.value}")


def _door_url(settings: MoatSettings, token: str) -> str:
    return f"{settings.local_gateway_url}/codec/ui/{token}"


@codec_app.command("url")
def codec_url() -> None:
    """Print the codec address to give a Temporal Web UI (decode only).

    For the gateway at MOAT_GATEWAY_URL and the door file it reads (MOAT_CODEC_DOOR, else
    the one `moat up` keeps in MOAT_HOME); set it as the UI's `codec.endpoint`."""
    from starter.runtime.codec_door import current_token

    settings = _settings()
    try:
        token = current_token(settings)
    except FileNotFoundError as exc:
        raise _fail(str(exc), code=2) from None
    out.print(_door_url(settings, token), soft_wrap=True)


@codec_app.command("rotate")
def codec_rotate(
    grace: Annotated[
        int,
        typer.Option(
            "--grace",
            min=0,
            help="Seconds the previous address keeps working (0: refused at once, for a "
            "token that leaked).",
        ),
    ] = 3600,
) -> None:
    """Give the Web UI's codec door a new token; the previous one is retired.

    Writes MOAT_CODEC_DOOR (else MOAT_HOME's door file), creating it if needed; gateways
    that read the file accept the new address at once and the old one until the grace
    period ends. Then give the UI the new address (restart `moat up`, or redeploy it)."""
    from datetime import timedelta

    from starter.runtime.codec_door import rotate

    settings = _settings()
    token = rotate(settings, grace=timedelta(seconds=grace))
    out.print(_door_url(settings, token), soft_wrap=True)
    when = f"for {grace} s more" if grace else "no longer"
    err.print(
        f"the previous codec address works {when}; give the Temporal Web UI this one "
        "(`moat up` gives its UI the current one when it starts)"
    )


@app.command("codec-url")
def codec_url_alias() -> None:
    """Print the codec address to give a Temporal Web UI (the same as `moat codec url`)."""
    codec_url()


@app.command()
def execute(
    capability: Annotated[str, typer.Argument(help="Capability id, e.g. demo.echo.")],
    input_json: Annotated[str, typer.Option("--input", help="The capability's input, JSON.")],
    key: Annotated[str | None, typer.Option("--key", help="Idempotency key.")] = None,
    version: Annotated[str | None, typer.Option("--version", help="Capability version.")] = None,
) -> None:
    """Execute a capability through the gateway and print the envelope."""
    from starter.client import MoatClientSync, MoatError
    from starter.service.tenants import demo_api_key

    settings = _settings()
    try:
        data: Any = json.loads(input_json)
    except ValueError as exc:
        raise _fail(f"--input is not valid JSON: {exc}", code=2) from None
    if not isinstance(data, dict):
        raise _fail("--input must be a JSON object", code=2)
    api_key = settings.api_key or demo_api_key(settings)
    if not api_key:
        raise _fail(
            "no API key",
            "set MOAT_API_KEY, or run `moat up` to create the demo tenant's key",
            code=2,
        )
    client = MoatClientSync(settings.local_gateway_url, api_key)
    try:
        result = client.execute(capability, data, idempotency_key=key, capability_version=version)
    except MoatError as exc:
        out.print_json(
            json.dumps(
                {
                    "http_status": exc.http_status,
                    "error": {"code": exc.code, "message": exc.message, "details": exc.details},
                    "trace_id": exc.trace_id,
                }
            )
        )
        raise typer.Exit(1) from None
    except OSError as exc:
        raise _fail(
            f"cannot reach the gateway at {settings.local_gateway_url}: {exc}",
            "start it with `make up` (or set MOAT_GATEWAY_URL)",
        ) from None
    if result.replayed:
        err.print("[cyan]idempotent replay:[/] the stored receipt, nothing executed again")
    out.print_json(result.envelope.model_dump_json())
    raise typer.Exit(0 if result.ok else 1)


def main() -> None:
    """The console script: the app, with the services it cannot reach named plainly."""
    from rich.markup import escape
    from sqlalchemy.exc import InterfaceError, OperationalError

    from store.keys.signing import KeyringMissingError

    try:
        app()
    except KeyringMissingError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}")
        raise SystemExit(1) from None
    except (OperationalError, InterfaceError) as exc:
        reason = str(exc.orig or exc).strip().splitlines()[0]
        err.print(f"[bold red]error:[/] cannot reach PostgreSQL: {reason}")
        err.print(
            "[dim]start the stack with `make up`, or point MOAT_DATABASE_URL at a running "
            "PostgreSQL[/]"
        )
        raise SystemExit(1) from None
    except RuntimeError as exc:
        if not str(exc).startswith("Failed client connect"):
            raise
        err.print(f"[bold red]error:[/] cannot reach Temporal: {exc}")
        err.print(
            "[dim]start the stack with `make up`, or point MOAT_TEMPORAL_ADDRESS at a "
            "running Temporal[/]"
        )
        raise SystemExit(1) from None

