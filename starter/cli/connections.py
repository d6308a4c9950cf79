"""``moat connection``: a tenant's credentials (add, list, show, rotate, revoke) and
``reencrypt`` under the newest connection key. A secret is read from stdin or a file, never
from an argument (arguments end up in shell history and process lists), and never printed."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from pydantic import ValidationError
from rich.table import Table

from schemas.connections import ConnectionCreate, ConnectionInfo, ConnectionRotate
from schemas.settings import MoatSettings
from starter.cli.identity import AsOperator
from starter.cli.output import AsJson, fail, id_column, out, print_json, run, usage
from starter.cli.tenants import TenantArg, tenant_of
from starter.devstack.ports import local_settings
from starter.runtime.database import owner_transaction
from starter.service import connections, field_errors, oauth_connect, tenants
from store import tenancy
from store.keyrings.connections import ConnectionCipher

connection_app = typer.Typer(
    no_args_is_help=True, help="Connections: credentials stored once, sealed, named by id."
)

ConnectionArg = Annotated[str, typer.Argument(help="The connection's id (con_…).")]
SecretFile = Annotated[
    Path | None,
    typer.Option(
        "--secret-file",
        help="Read the secret from this file. Unset: from stdin (pipe it, or type it and end "
        "with Ctrl-D).",
        dir_okay=False,
    ),
]


def _secret(path: Path | None) -> str:
    """The secret, without the line break a file or a pipe ends it with."""
    raw = path.read_text() if path is not None else sys.stdin.read()
    secret = raw.strip("\r\n")
    if not secret:
        raise usage(
            "no secret given",
            "pipe it on stdin or name a file with --secret-file",
            code="no_secret",
        )
    return secret


def _valid(model: Any, **fields: Any) -> Any:
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        where = "; ".join(
            f"{'.'.join(e['loc']) or 'body'}: {e['msg']}" for e in field_errors(exc.errors())
        )
        raise usage(f"invalid connection: {where}", "see `moat connection add --help`") from None


def _show(info: ConnectionInfo, as_json: bool) -> None:
    if as_json:
        out.print_json(info.model_dump_json())
        return
    table = Table(show_header=False)
    for name, value in (
        ("id", info.id),
        ("tenant_id", info.tenant_id),
        ("type", info.type),
        ("name", info.name),
        ("config", json.dumps(info.config)),
        ("fingerprint", info.fingerprint),
        ("last4", info.last4 or "-"),
        ("key_id", info.key_id),
        ("created", f"{info.created_at:%F %T}"),
        ("rotated", f"{info.rotated_at:%F %T}" if info.rotated_at else "-"),
        ("revoked", f"{info.revoked_at:%F %T}" if info.revoked_at else "-"),
    ):
        table.add_row(name, value)
    if info.needs_reauth_at is not None:
        table.add_row("needs_reauth", _needs_reauth(info))
    out.print(table)


def _needs_reauth(info: ConnectionInfo) -> str:
    assert info.needs_reauth_at is not None
    return (
        f"{info.needs_reauth_at:%F %T}: {info.needs_reauth_reason or 'refused'} "
        f"(`moat connection connect {info.id}` again)"
    )


async def _add(settings: MoatSettings, tenant: str, body: ConnectionCreate) -> ConnectionInfo:
    cipher = ConnectionCipher.from_settings(settings)
    async with owner_transaction(settings) as session:
        row = await tenant_of(session, tenant)
        return await connections.add(session, cipher, row.id, body, settings.quota_limits)


@connection_app.command("add", cls=AsOperator)
def add(
    tenant: TenantArg,
    type_: Annotated[
        str,
        typer.Option(
            "--type",
            help="What the credential is for: webhook, slack, github, http_bearer, or a type "
            "an installed package declares (moat capabilities lists each one's types).",
        ),
    ],
    name: Annotated[str, typer.Option("--name", help="A label, e.g. the workspace.")],
    config: Annotated[
        str,
        typer.Option(
            "--config",
            help='Not secret settings, JSON: {"base_url": "…"} or {"allowed_origins": ["https://…"]}.',
        ),
    ] = "{}",
    secret_file: SecretFile = None,
    as_json: AsJson = False,
) -> None:
    """Store a credential for a tenant; executions name it with its id."""
    try:
        settings_json = json.loads(config)
    except ValueError as exc:
        raise usage(f"--config is not valid JSON: {exc}", "give a JSON object") from None
    body = _valid(
        ConnectionCreate,
        type=type_,
        name=name,
        secret=_secret(secret_file),
        config=settings_json,
    )
    _show(run(_add(local_settings(), tenant, body)), as_json)


async def _list(settings: MoatSettings, tenant: str) -> list[ConnectionInfo]:
    async with owner_transaction(settings) as session:
        row = await tenant_of(session, tenant)
        return await connections.list_all(session, row.id)


@connection_app.command("list", cls=AsOperator)
def list_(tenant: TenantArg, as_json: AsJson = False) -> None:
    """List a tenant's connections, revoked ones included (never their secrets)."""
    found = run(_list(local_settings(), tenant))
    if as_json:
        print_json([c.model_dump(mode="json") for c in found])
        return
    if not found:
        out.print("no connections; add one with `moat connection add`")
        return
    table = Table("name", "type", "fingerprint", "last4", "created", "revoked")
    id_column(table, "id", [c.id for c in found])
    for c in found:
        revoked = f"{c.revoked_at:%F %T}" if c.revoked_at else ""
        if c.needs_reauth_at is not None and c.revoked_at is None:
            revoked = f"needs reauth since {c.needs_reauth_at:%F %T}"
        table.add_row(
            c.name, c.type, c.fingerprint, c.last4, f"{c.created_at:%F %T}", revoked, c.id
        )
    out.print(table)


async def _one(settings: MoatSettings, tenant: str, connection_id: str) -> ConnectionInfo:
    async with owner_transaction(settings) as session:
        row = await tenant_of(session, tenant)
        return await connections.show(session, row.id, connection_id)


@connection_app.command("show", cls=AsOperator)
def show(tenant: TenantArg, connection_id: ConnectionArg, as_json: AsJson = False) -> None:
    """One connection (never its secret)."""
    _show(run(_one(local_settings(), tenant, connection_id)), as_json)


async def _rotate(
    settings: MoatSettings, tenant: str, connection_id: str, secret: str
) -> ConnectionInfo:
    cipher = ConnectionCipher.from_settings(settings)
    async with owner_transaction(settings) as session:
        row = await tenant_of(session, tenant)
        return await connections.rotate(
            session, cipher, row.id, connection_id, secret, datetime.now(UTC)
        )


@connection_app.command("rotate", cls=AsOperator)
def rotate(
    tenant: TenantArg,
    connection_id: ConnectionArg,
    secret_file: SecretFile = None,
    as_json: AsJson = False,
) -> None:
    """Replace a connection's secret; runs use it from their next attempt on."""
    body = _valid(ConnectionRotate, secret=_secret(secret_file))
    _show(run(_rotate(local_settings(), tenant, connection_id, body.secret)), as_json)


async def _revoke(settings: MoatSettings, tenant: str, connection_id: str) -> ConnectionInfo:
    async with owner_transaction(settings) as session:
        row = await tenant_of(session, tenant)
        return await connections.revoke(session, row.id, connection_id, datetime.now(UTC))


@connection_app.command("revoke", cls=AsOperator)
def revoke(tenant: TenantArg, connection_id: ConnectionArg, as_json: AsJson = False) -> None:
    """Revoke a connection: kept for the record, refused from the next attempt on."""
    _show(run(_revoke(local_settings(), tenant, connection_id)), as_json)


async def _reencrypt(settings: MoatSettings, new_key: bool) -> tuple[str, dict[str, int]]:
    cipher = ConnectionCipher.from_settings(settings)
    if new_key:
        try:
            cipher.add_key()
        except ValueError as exc:
            raise fail(
                "key_pinned", str(exc), "set a new MOAT_CONNECTION_KEY, then run again"
            ) from None
    counts: dict[str, int] = {}
    async with owner_transaction(settings) as session:
        directory = await tenants.list_tenants(session)
    for tenant in directory:
        async with owner_transaction(settings) as session:
            await tenancy.set_tenant(session, tenant.id)
            counts[tenant.id] = await connections.reencrypt(session, cipher, tenant.id)
    return cipher.active_key_id, counts


@connection_app.command("reencrypt", cls=AsOperator)
def reencrypt(
    new_key: Annotated[
        bool,
        typer.Option(
            "--new-key",
            help="First add a fresh key to the connection keyring and make it the active one.",
        ),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Re-seal every live connection that an older key sealed under the active key. Run it
    after a key rotation; remove an old key from the keyring only afterwards."""
    active, counts = run(_reencrypt(local_settings(), new_key))
    total = sum(counts.values())
    if as_json:
        print_json({"active_key_id": active, "reencrypted": total, "by_tenant": counts})
        return
    out.print(f"{total} connection(s) re-sealed under key {active}")


async def _connect(settings: MoatSettings, tenant: str, connection_id: str) -> str:
    cipher = ConnectionCipher.from_settings(settings)
    async with owner_transaction(settings) as session:
        row = await tenant_of(session, tenant)
        one = await connections.show(session, row.id, connection_id)
        async with httpx.AsyncClient(follow_redirects=False) as http:
            found = await oauth_connect.metadata(
                http, dict(one.config), list(settings.http_allow_hosts)
            )
        return await oauth_connect.begin(
            session,
            cipher,
            row.id,
            connection_id,
            redirect_uri=oauth_connect.redirect_uri(settings),
            found=found,
        )


@connection_app.command("connect", cls=AsOperator)
def connect(tenant: TenantArg, connection_id: ConnectionArg) -> None:
    """Connect a person's account to an oauth2 connection (again, after needs_reauth):
    prints the URL to open; the provider sends the person back to the gateway, which
    stores the grant. The OAuth client must list the gateway's callback
    (<gateway>/v1/connections/oauth/callback) as a redirect URI."""
    url = run(_connect(local_settings(), tenant, connection_id))
    out.print("open this URL to connect the account (valid 10 minutes):")
    sys.stdout.write(url + "\n")
