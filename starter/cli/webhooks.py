"""``moat webhook``: a tenant's webhook subscriptions, through the gateway."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from starter.cli.identity import AsTenant
from starter.cli.output import AsJson, id_column, out, print_json
from starter.cli.tenant_api import call
from starter.devstack.ports import LISTEN_PORT, local_settings
from starter.runtime import links

webhook_app = typer.Typer(
    no_args_is_help=True,
    help="Webhook subscriptions (signed deliveries); listen for them locally.",
)


def _secret_note(secret: str) -> None:
    out.print(f"signing secret: [bold]{escape(secret)}[/]")
    out.print("[dim]Shown this once: keep it where the endpoint verifies signatures.[/]")


@webhook_app.command("add", cls=AsTenant)
def add(
    url: str,
    event: Annotated[
        list[str],
        typer.Option(
            "--event",
            "-e",
            help="execution.completed, execution.failed, execution.dead_lettered, "
            "approval.requested, approval.decided (repeat the option).",
        ),
    ],
    max_retries: Annotated[int, typer.Option(min=0, max=30)] = 3,
    retry_base_seconds: Annotated[float, typer.Option(min=0.001)] = 2.0,
    as_json: AsJson = False,
) -> None:
    """Subscribe URL to events; prints the signing secret once."""
    created = call(
        local_settings(),
        "POST",
        "/v1/webhooks",
        body={
            "url": url,
            "events": event,
            "max_retries": max_retries,
            "retry_base_seconds": retry_base_seconds,
        },
    )
    if as_json:
        print_json(created)
        return
    out.print(f"webhook {created['id']} → {escape(created['url'])}")
    _secret_note(created["secret"])


@webhook_app.command("listen", cls=AsTenant)
def listen(
    forward_to: Annotated[
        str | None,
        typer.Option("--forward-to", help="Send each verified delivery on to this URL."),
    ] = None,
    event: Annotated[
        list[str] | None,
        typer.Option("--event", "-e", help="Only these events (repeat the option). Default: all."),
    ] = None,
    port: Annotated[
        int, typer.Option(help="The loopback port to listen on (moat up allows the default).")
    ] = LISTEN_PORT,
) -> None:
    """Receive the tenant's signed deliveries here: verify and print each, and forward it.

    A temporary webhook points at a listener on 127.0.0.1; each delivery's signature is
    checked with its secret, a line says what came, and with --forward-to the body and its
    webhook-* headers go on to that URL, whose status is printed and answered to Moat. Ctrl-C
    removes the webhook."""
    from starter.cli.listen import EVENTS
    from starter.cli.listen import listen as run

    run(
        local_settings(),
        forward_to=forward_to,
        events=event or list(EVENTS),
        host="127.0.0.1",
        port=port,
    )


@webhook_app.command("list", cls=AsTenant)
def list_webhooks(as_json: AsJson = False) -> None:
    """The tenant's subscriptions."""
    page = call(local_settings(), "GET", "/v1/webhooks")
    if as_json:
        print_json(page)
        return
    table = Table()
    id_column(table, "id", [hook["id"] for hook in page["items"]])
    for name in ("url", "events", "status", "retries", "first wait", "old secret until"):
        table.add_column(name)
    for hook in page["items"]:
        colour = "green" if hook["status"] == "active" else "red"
        status = hook["status"] + (
            f" ({hook['disabled_reason']})" if hook["disabled_reason"] else ""
        )
        table.add_row(
            hook["id"],
            escape(hook["url"]),
            ", ".join(hook["events"]),
            f"[{colour}]{escape(status)}[/]",
            str(hook["max_retries"]),
            f"{hook['retry_base_seconds']:g}s, doubling",
            hook["previous_secret_expires_at"] or "",
        )
    out.print(table)


@webhook_app.command("rotate", cls=AsTenant)
def rotate(webhook_id: str, as_json: AsJson = False) -> None:
    """A new signing secret; the old one keeps signing beside it for 24 h."""
    rotated = call(
        local_settings(), "POST", links.path("v1", "webhooks", webhook_id, "rotate-secret")
    )
    if as_json:
        print_json(rotated)
        return
    _secret_note(rotated["secret"])
    out.print(f"the previous secret signs too until {rotated['previous_secret_expires_at']}")


@webhook_app.command("remove", cls=AsTenant)
def remove(webhook_id: str) -> None:
    """No more deliveries to this subscription."""
    call(local_settings(), "DELETE", links.path("v1", "webhooks", webhook_id))
    out.print(f"webhook {webhook_id} removed")


@webhook_app.command("deliveries", cls=AsTenant)
def deliveries(
    webhook_id: str,
    limit: Annotated[int, typer.Option(min=1, max=500, help="At most this many.")] = 50,
    cursor: Annotated[str | None, typer.Option(help="Where the previous page ended.")] = None,
    as_json: AsJson = False,
) -> None:
    """A subscription's delivery attempts, newest first, a page at a time."""
    params = {"limit": limit, "cursor": cursor}
    page = call(local_settings(), "GET", f"/v1/webhooks/{webhook_id}/deliveries", params=params)
    if as_json:
        print_json(page)
        return
    table = Table("time (UTC)", "event")
    id_column(table, "webhook-id", [d["webhook_id"] for d in page["items"]])
    for name in ("attempt", "status", "ms", "error"):
        table.add_column(name)
    for d in page["items"]:
        ok = d["outcome"] == "delivered"
        table.add_row(
            d["attempted_at"][:19].replace("T", " "),
            d["event_type"],
            d["webhook_id"],
            str(d["attempt"]),
            f"[{'green' if ok else 'red'}]{d['http_status'] or '-'}[/]",
            str(d["latency_ms"]),
            escape(d["error"] or ""),
        )
    out.print(table)
    if page.get("next_cursor"):
        out.print(f"more: --cursor {page['next_cursor']}")
