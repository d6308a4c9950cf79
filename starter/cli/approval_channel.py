"""``moat approvals channel``: where the tenant's new approvals are posted in Slack. The
Slack app's signing secret is read from stdin or a file, never from the command line, and
never printed."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from starter.cli.connections import SecretFile, _secret
from starter.cli.identity import AsTenant
from starter.cli.output import AsJson, out, print_json
from starter.cli.tenant_api import call
from starter.devstack.ports import local_settings

channel_app = typer.Typer(no_args_is_help=True, help="The tenant's approvals channel in Slack.")
PATH = "/v1/approvals/channel"


def _print(shown: dict[str, Any]) -> None:
    for name in ("kind", "connection_id", "channel", "created_by", "updated_at"):
        out.print(f"{name}: {shown[name]}", soft_wrap=True)
    out.print(f"Slack Interactivity Request URL: <gateway>{shown['interactivity_path']}")


@channel_app.command("set", cls=AsTenant)
def set_channel(
    connection_id: Annotated[str, typer.Argument(help="A Slack connection of the tenant.")],
    channel: Annotated[str, typer.Argument(help="The channel's id (C…).")],
    secret_file: SecretFile = None,
    as_json: AsJson = False,
) -> None:
    """Post new approvals to CHANNEL through the connection; the Slack app's signing secret
    from stdin or --secret-file. Needs policy:write and the scopes to execute
    slack.post_message and slack.update_message (the announcements run with this key's)."""
    body = {
        "connection_id": connection_id,
        "channel": channel,
        "signing_secret": _secret(secret_file),
    }
    shown = call(local_settings(), "PUT", PATH, body)
    print_json(shown) if as_json else _print(shown)


@channel_app.command("show", cls=AsTenant)
def show(as_json: AsJson = False) -> None:
    """The approvals channel (never its signing secret)."""
    shown = call(local_settings(), "GET", PATH)
    print_json(shown) if as_json else _print(shown)


@channel_app.command("clear", cls=AsTenant)
def clear() -> None:
    """Stop posting approvals to Slack."""
    call(local_settings(), "DELETE", PATH)
    out.print("approvals channel cleared")
