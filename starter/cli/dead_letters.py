"""``moat dlq``: what needs a person (deliveries out of attempts, executions whose effect
dead-lettered), through the gateway."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from starter.cli.identity import AsTenant
from starter.cli.output import AsJson, id_argument, id_column, out, print_json
from starter.cli.tenant_api import call
from starter.devstack.ports import local_settings
from starter.runtime import links

DeadLetterArg = Annotated[str, id_argument("dead letter")]

dlq_app = typer.Typer(no_args_is_help=True, help="Dead letters: list, show, requeue, resolve.")


@dlq_app.command("list", cls=AsTenant)
def list_dead_letters(
    status: Annotated[str, typer.Option(help="open, requeued or resolved.")] = "open",
    limit: Annotated[int, typer.Option(min=1, max=500, help="At most this many.")] = 50,
    cursor: Annotated[str | None, typer.Option(help="Where the previous page ended.")] = None,
    as_json: AsJson = False,
) -> None:
    """Dead letters, newest first, a page at a time."""
    params = {"status": status, "limit": limit, "cursor": cursor}
    page = call(local_settings(), "GET", "/v1/dead-letters", params=params)
    if as_json:
        print_json(page)
        return
    out.print(dead_letters_table(page["items"]))
    more = f" (more: --cursor {page['next_cursor']})" if page.get("next_cursor") else ""
    out.print(f"{len(page['items'])} {status} dead letters{more}")


def dead_letters_table(items: list[dict[str, Any]]) -> Table:
    """One dead letter a row: its id whole, the id of what dead-lettered (a receipt or a
    delivery) whole below it."""
    table = Table()
    id_column(table, "id / subject", [value for d in items for value in (d["id"], d["subject_id"])])
    for name in ("time (UTC)", "kind", "code", "status", "reason"):
        table.add_column(name)
    for d in items:
        table.add_row(
            f"{d['id']}\n[dim]{d['subject_id']}[/]",
            d["created_at"][:19].replace("T", " "),
            d["kind"],
            d["error_code"] or "",
            d["status"],
            escape(d["reason"]),
        )
    return table


@dlq_app.command("show", cls=AsTenant)
def show(dead_letter_id: DeadLetterArg, as_json: AsJson = False) -> None:
    """One dead letter (and, for an execution, its compensating-action record)."""
    settings = local_settings()
    letter = call(settings, "GET", links.path("v1", "dead-letters", dead_letter_id))
    action = None
    if letter.get("compensating_action_id"):
        action = call(
            settings,
            "GET",
            links.path("v1", "compensating-actions", letter["compensating_action_id"]),
        )
    if as_json:
        print_json({"dead_letter": letter, "compensating_action": action})
        return
    table = Table(show_header=False, title=f"dead letter {letter['id']}")
    table.add_column("field")
    table.add_column("value", overflow="fold")
    for name, value in letter.items():
        table.add_row(name, escape("" if value is None else str(value)))
    if action is not None:
        table.add_row("effect", action["effect"])
        for name, value in action["attempted"].items():
            table.add_row(f"attempted.{name}", escape(str(value)))
        for entry in action["operator_actions"]:
            table.add_row("operator", escape(f"{entry['at']} {entry['action']} by {entry['by']}"))
    out.print(table)


@dlq_app.command("requeue", cls=AsTenant)
def requeue(
    dead_letter_id: DeadLetterArg,
    effect_did_not_happen: Annotated[
        bool,
        typer.Option(
            "--effect-did-not-happen",
            help="For an execution: you checked that its effect did not take place; a new "
            "attempt starts under a new key.",
        ),
    ] = False,
    note: Annotated[str, typer.Option(help="Why, for the record.")] = "",
) -> None:
    """Try again: a delivery as it was (same webhook-id), an execution only with
    --effect-did-not-happen."""
    letter = call(
        local_settings(),
        "POST",
        links.path("v1", "dead-letters", dead_letter_id, "requeue"),
        body={"effect_did_not_happen": effect_did_not_happen, "note": note},
    )
    out.print(f"requeued as {letter['requeued_as']}")


@dlq_app.command("resolve", cls=AsTenant)
def resolve(
    dead_letter_id: DeadLetterArg,
    note: Annotated[str, typer.Option(help="What was done about it (required).")],
) -> None:
    """Close by hand, with a note."""
    letter = call(
        local_settings(),
        "POST",
        links.path("v1", "dead-letters", dead_letter_id, "resolve"),
        body={"note": note},
    )
    out.print(f"dead letter {letter['id']} resolved")
