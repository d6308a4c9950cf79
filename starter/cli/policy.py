"""``moat policy``: the tenant's policy document (mode and rules), each ``set`` a new
version, through the gateway."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from starter.cli.identity import AsTenant
from starter.cli.output import AsJson, out, print_json, usage
from starter.cli.tenant_api import call
from starter.devstack.ports import local_settings

policy_app = typer.Typer(no_args_is_help=True, help="The tenant's policy document.")


def _rules_table(version: dict[str, Any]) -> Table:
    title = f"policy version {version['version']}: mode {version['mode']}"
    table = Table("capability", "approval", "ttl (s)", "approvers", "budget", title=title)
    for rule in version["rules"]:
        approval = rule.get("requires_approval")
        budget = rule.get("budget")
        table.add_row(
            escape(rule["capability"]),
            "catalog" if approval is None else ("required" if approval else "no"),
            str(rule["approval_ttl_seconds"]),
            escape(" ".join(rule["approvers"]))
            + (" (self allowed)" if rule.get("allow_self_approval") else "")
            + (" (in session)" if rule.get("approve_in_session") else ""),
            f"{budget['limit']} per {budget['period']}" if budget else "",
        )
    return table


@policy_app.command("show", cls=AsTenant)
def show(
    version: Annotated[int | None, typer.Option(help="An older version.")] = None,
    as_json: AsJson = False,
) -> None:
    """The policy in force (or an older version)."""
    path = "/v1/policy" if version is None else f"/v1/policy/versions/{version}"
    answer = call(local_settings(), "GET", path)
    if as_json:
        print_json(answer)
        return
    out.print(_rules_table(answer))


@policy_app.command("set", cls=AsTenant)
def set_(
    file: Annotated[Path, typer.Option("--file", help="The policy document (JSON).")],
    as_json: AsJson = False,
) -> None:
    """Replace the policy with a document ({"mode": …, "rules": […]}); needs a key with
    scope policy:write. Pending approvals under the old version become stale."""
    try:
        document = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise usage(
            f"cannot read {file} as JSON: {exc}",
            'give a JSON file, e.g. {"mode": "strict", "rules": []}',
            code="unreadable_file",
        ) from None
    answer = call(local_settings(), "PUT", "/v1/policy", document)
    if as_json:
        print_json(answer)
        return
    out.print(_rules_table(answer))
    out.print(f"policy version {answer['version']} is in force")


@policy_app.command("history", cls=AsTenant)
def history(
    limit: Annotated[int, typer.Option(help="Most versions to show (1 to 200).")] = 50,
    cursor: Annotated[str | None, typer.Option(help="Where the previous page ended.")] = None,
    as_json: AsJson = False,
) -> None:
    """The versions, newest first, a page at a time."""
    params = {"limit": limit, "cursor": cursor}
    page = call(local_settings(), "GET", "/v1/policy/versions", params=params)
    if as_json:
        print_json(page)
        return
    table = Table("version", "mode", "rules", "by", "at (UTC)")
    for v in page["items"]:
        table.add_row(
            str(v["version"]), v["mode"], str(len(v["rules"])), v["created_by"], v["created_at"]
        )
    out.print(table)
    if page.get("next_cursor"):
        out.print(f"more: --cursor {page['next_cursor']}")
