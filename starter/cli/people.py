"""``moat people``: the tenant's people (approvers and admins who are not keys), through
the gateway with a key holding `people:read` / `people:write`. A key gives a person only
scopes it holds itself."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from starter.cli.identity import AsTenant
from starter.cli.output import AsJson, id_column, out, print_json
from starter.cli.tenant_api import call
from starter.devstack.ports import local_settings
from starter.runtime import links

people_app = typer.Typer(
    no_args_is_help=True, help="People: approvers who sign in to the console or use Slack."
)

HandleArg = Annotated[
    str, typer.Argument(help="The person's handle (lower case, digits, . _ -): person:<handle>.")
]
HINTS = {
    "person_not_found": "see `moat people list`",
    "scope_missing": "a key gives only scopes it holds: use a key with them (moat api-key "
    "create TENANT --scope SCOPE) or leave them out",
    "conflict": "see `moat people list`: change or disable the person who holds it",
    "schema_validation_failed": "see `moat people add --help`",
}


def _row(p: dict[str, Any]) -> tuple[str, ...]:
    oidc = f"{p['oidc_issuer']}\n{p['oidc_subject']}" if p.get("oidc_subject") else "-"
    state = f"[red]disabled {p['disabled_at'][:16]}[/]" if p.get("disabled_at") else "active"
    return (
        escape(p["actor"]),
        escape(p["display_name"]) or "-",
        escape(" ".join(p["scopes"])) or "-",
        escape(oidc),
        escape(p.get("slack_user_id") or "-"),
        state,
    )


def _table(items: list[dict[str, Any]]) -> Table:
    table = Table()
    id_column(table, "person", [p["actor"] for p in items])
    for header in ("name", "scopes", "OpenID issuer / subject", "Slack user"):
        table.add_column(header, overflow="fold")
    table.add_column("state")
    for p in items:
        table.add_row(*_row(p))
    return table


@people_app.command("list", cls=AsTenant)
def list_(as_json: AsJson = False) -> None:
    """The tenant's people, disabled ones included (needs scope people:read)."""
    page = call(local_settings(), "GET", "/v1/people", hints=HINTS)
    if as_json:
        print_json(page)
        return
    if not page["items"]:
        out.print("no people; add one with `moat people add HANDLE --scope approvals:write`")
        return
    out.print(_table(page["items"]))


@people_app.command("add", cls=AsTenant)
def add(
    handle: HandleArg,
    name: Annotated[str, typer.Option("--name", help="How the console names them.")] = "",
    scope: Annotated[
        list[str] | None,
        typer.Option("--scope", help="A scope to give (repeat it); only scopes your key holds."),
    ] = None,
    oidc_issuer: Annotated[
        str | None, typer.Option(help="The OpenID provider's issuer URL (with --oidc-subject).")
    ] = None,
    oidc_subject: Annotated[
        str | None, typer.Option(help="The person's subject (sub) at that issuer.")
    ] = None,
    slack_user: Annotated[str | None, typer.Option(help="The person's Slack user id.")] = None,
    as_json: AsJson = False,
) -> None:
    """Add a person, or set an existing one to exactly this (needs scope people:write).
    A changed person's console sessions end; a disabled person is enabled again."""
    body = {
        "display_name": name,
        "scopes": scope or [],
        "oidc_issuer": oidc_issuer,
        "oidc_subject": oidc_subject,
        "slack_user_id": slack_user,
    }
    path = links.path("v1", "people", handle)
    person = call(local_settings(), "PUT", path, body, hints=HINTS)
    if as_json:
        print_json(person)
        return
    out.print(_table([person]))


@people_app.command("disable", cls=AsTenant)
def disable(handle: HandleArg, as_json: AsJson = False) -> None:
    """Disable a person: console sign-in and Slack decisions refused, sessions ended
    (needs scope people:write; moat people add enables them again)."""
    path = links.path("v1", "people", handle, "disable")
    person = call(local_settings(), "POST", path, hints=HINTS)
    if as_json:
        print_json(person)
        return
    out.print(f"{escape(person['actor'])} disabled at {person['disabled_at']}")
