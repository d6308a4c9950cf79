"""``moat receipts``: the tenant's receipts through the gateway, as its agents see them."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from starter.cli.agent import agent_client, gateway_answers
from starter.cli.identity import AsTenant
from starter.cli.output import AsJson, id_argument, id_column, out
from starter.devstack.ports import local_settings

if TYPE_CHECKING:
    from moat_client.models import Receipt

receipts_app = typer.Typer(no_args_is_help=True, help="Receipts, read through the gateway.")

STATUS_COLOURS = {"success": "green", "idempotent_hit": "cyan", "policy_denied": "yellow"}


@receipts_app.command("list", cls=AsTenant)
def list_receipts(
    status: Annotated[
        str | None,
        typer.Option(help="success, failure, timeout, policy_denied or idempotent_hit."),
    ] = None,
    capability: Annotated[str | None, typer.Option(help="Capability id, e.g. demo.echo.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=200, help="At most this many.")] = 20,
    cursor: Annotated[str | None, typer.Option(help="Where the previous page ended.")] = None,
    as_json: AsJson = False,
) -> None:
    """The newest receipts first, a page at a time (--json: the gateway's page as it
    is)."""
    settings = local_settings()
    with gateway_answers(settings):
        page = agent_client(settings).list_receipts(
            status=status, capability_id=capability, limit=limit, cursor=cursor
        )
    if as_json:
        out.print_json(page.model_dump_json())
        return
    out.print(receipts_table(page.items))
    more = f" (more: --cursor {page.next_cursor})" if page.next_cursor else ""
    out.print(f"{len(page.items)} receipts{more}")


# Under this many columns a receipt's time goes under its id, and its version and key are
# left to `moat receipts show`: nothing is cut to make the rest fit.
WIDE = 120


def receipts_table(items: list[Receipt]) -> Table:
    """One receipt a row, its id whole (``moat receipts show`` takes it)."""
    wide = out.width >= WIDE
    table = Table()
    id_column(table, "receipt" if wide else "receipt / time (UTC)", [r.id for r in items])
    names = (
        ("time (UTC)", "capability", "status", "error", "ms", "key")
        if wide
        else ("capability", "status", "ms")
    )
    for name in names:
        table.add_column(name, overflow="fold", justify="right" if name == "ms" else "left")
    for receipt in items:
        colour = STATUS_COLOURS.get(receipt.status, "red")
        status = f"[{colour}]{escape(receipt.status)}[/]"
        at = f"{receipt.timestamp:%Y-%m-%d %H:%M:%S}"
        if wide:
            table.add_row(
                receipt.id,
                at,
                escape(f"{receipt.capability_id}@{receipt.capability_version}"),
                status,
                receipt.error_code or "",
                str(receipt.latency_ms),
                escape(receipt.idempotency_key),
            )
        else:
            error = f"\n{escape(receipt.error_code)}" if receipt.error_code else ""
            table.add_row(
                f"{receipt.id}\n[dim]{at}[/]",
                escape(receipt.capability_id),
                status + error,
                str(receipt.latency_ms),
            )
    return table


@receipts_app.command("show", cls=AsTenant)
def show(receipt_id: Annotated[str, id_argument("receipt")], as_json: AsJson = False) -> None:
    """One receipt, field by field (--json: as the gateway returns it)."""
    settings = local_settings()
    with gateway_answers(settings):
        receipt = agent_client(settings).get_receipt(receipt_id)
    if as_json:
        out.print_json(receipt.model_dump_json())
        return
    table = Table(show_header=False, title=f"receipt {receipt.id}")
    table.add_column("field")
    table.add_column("value", overflow="fold")
    for name, value in receipt.model_dump(mode="json").items():
        if name == "provider_evidence" and value is None:
            continue  # a call that left nothing at a provider, or a receipt from before
        shown = json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else value
        table.add_row(name, escape("" if shown is None else str(shown)))
    out.print(table)
