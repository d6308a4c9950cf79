"""``moat approvals``: the calls waiting for a person, and deciding them, through the
gateway. ``approve`` and ``reject`` first show the call (its redacted input, digest and
policy version) and bind the decision to exactly what was shown."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from schemas.approvals import ApprovalStatus
from schemas.settings import MoatSettings
from starter.cli.approval_channel import channel_app
from starter.cli.identity import AsTenant
from starter.cli.output import AsJson, fail, id_argument, id_column, out, print_json
from starter.cli.tenant_api import call
from starter.devstack.ports import local_settings
from starter.runtime import links

approvals_app = typer.Typer(no_args_is_help=True, help="Approvals of calls held by policy.")
approvals_app.add_typer(channel_app, name="channel")

STATUS_COLOURS = {"pending": "yellow", "approved": "green", "rejected": "red", "expired": "dim"}
Comment = Annotated[str | None, typer.Option(help="Why, for the record.")]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
ApprovalArg = Annotated[str, id_argument("approval")]


@approvals_app.command("list", cls=AsTenant)
def list_(
    status: Annotated[ApprovalStatus | None, typer.Option(help="Only these.")] = None,
    limit: Annotated[int, typer.Option(help="Most approvals to show (1 to 200).")] = 50,
    cursor: Annotated[str | None, typer.Option(help="Where the previous page ended.")] = None,
    as_json: AsJson = False,
) -> None:
    """Approvals, newest first, a page at a time."""
    params = {"status": status.value if status else None, "limit": limit, "cursor": cursor}
    page = call(local_settings(), "GET", "/v1/approvals", params=params)
    if as_json:
        print_json(page)
        return
    answer = page["items"]
    out.print(approvals_table(answer))
    more = f" (more: --cursor {page['next_cursor']})" if page.get("next_cursor") else ""
    out.print(f"{len(answer)} approvals{more}")


def approvals_table(items: list[dict[str, Any]]) -> Table:
    """One approval a row: its id whole, its receipt's id whole below it (the commands that
    take them need them whole; two id columns side by side do not fit 80 columns)."""
    table = Table()
    ids = [value for a in items for value in (a["id"], a["receipt_id"])]
    id_column(table, "approval / receipt", ids)
    # Two values a cell, one a line, so that nothing is cut at 80 columns.
    table.add_column("status / expires (UTC)", overflow="fold")
    table.add_column("capability / requested by", overflow="fold")
    for a in items:
        colour = STATUS_COLOURS.get(a["status"], "white")
        expires = a["expires_at"][:16].replace("T", " ")
        table.add_row(
            f"{a['id']}\n[dim]{a['receipt_id']}[/]",
            f"[{colour}]{a['status']}[/]\n[dim]{expires}[/]",
            f"{escape(a['capability_id'])}\n[dim]{escape(a['requested_by'])}[/]",
        )
    return table


def _table(a: dict[str, Any]) -> Table:
    table = Table(show_header=False, title=f"approval {a['id']}")
    table.add_column("field")
    table.add_column("value", overflow="fold")
    rows = [
        ("status", a["status"]),
        ("capability", f"{a['capability_id']}@{a['capability_version']}"),
        ("input (redacted)", json.dumps(a.get("input"), indent=2, ensure_ascii=False)),
        ("input_hash", a["input_hash"]),
        ("policy_version", str(a["policy_version"])),
        ("requested by", a["requested_by"]),
        ("requested at", a["requested_at"]),
        ("expires at", a["expires_at"]),
        ("receipt", a["receipt_id"]),
    ]
    if a.get("decided_by"):
        rows += [
            ("decided by", a["decided_by"]),
            ("decided at", a["decided_at"] or ""),
            ("approved digest", a.get("approved_digest") or ""),
            ("comment", a.get("comment") or ""),
        ]
    for name, value in rows:
        table.add_row(name, escape(value))
    return table


def _get(settings: MoatSettings, approval_id: str) -> dict[str, Any]:
    answer: dict[str, Any] = call(settings, "GET", links.path("v1", "approvals", approval_id))
    return answer


@approvals_app.command("show", cls=AsTenant)
def show(approval_id: ApprovalArg, as_json: AsJson = False) -> None:
    """One approval with the redacted input it is about."""
    answer = _get(local_settings(), approval_id)
    if as_json:
        print_json(answer)
        return
    out.print(_table(answer))


def _decide(action: str, approval_id: str, comment: str | None, yes: bool) -> None:
    settings = local_settings()
    shown = _get(settings, approval_id)
    out.print(_table(shown))
    if not yes and not typer.confirm(f"{action} this exact call?"):
        raise fail(
            "not_confirmed", f"approval {shown['id']} not decided", "answer y, or pass --yes"
        )
    body = {
        "input_hash": shown["input_hash"],
        "policy_version": shown["policy_version"],
        "comment": comment,
    }
    # A prefix was resolved by the read: the decision names the approval shown, whole.
    decided = call(settings, "POST", links.path("v1", "approvals", shown["id"], action), body)
    out.print(f"{shown['id']} {decided['status']} by {decided['decided_by']}")


@approvals_app.command("approve", cls=AsTenant)
def approve(approval_id: ApprovalArg, comment: Comment = None, yes: Yes = False) -> None:
    """Approve the call shown (needs scope approvals:write; not the key that made it)."""
    _decide("approve", approval_id, comment, yes)


@approvals_app.command("reject", cls=AsTenant)
def reject(approval_id: ApprovalArg, comment: Comment = None, yes: Yes = False) -> None:
    """Reject the call shown: its run ends approval_rejected, the provider is not called."""
    _decide("reject", approval_id, comment, yes)
