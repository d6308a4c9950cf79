"""``moat alerts route``: where the tenant's own operations alerts (its dead letters, its
``outcome_unknown`` executions, its connections needing re-auth) are sent, instead of the
deployment's route."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from starter.cli.identity import AsTenant
from starter.cli.output import AsJson, out, print_json
from starter.cli.tenant_api import call
from starter.devstack.ports import local_settings

alerts_app = typer.Typer(no_args_is_help=True, help="The tenant's own operations alerts.")
route_app = typer.Typer(no_args_is_help=True, help="The tenant's own alert route.")
alerts_app.add_typer(route_app, name="route")
PATH = "/v1/alerts/route"


def _print(shown: dict[str, Any]) -> None:
    for name in ("connection_id", "target", "created_by", "updated_at"):
        out.print(f"{name}: {shown[name]}", soft_wrap=True)


@route_app.command("set", cls=AsTenant)
def set_route(
    connection_id: Annotated[
        str, typer.Argument(help="A slack or webhook connection of the tenant.")
    ],
    target: Annotated[
        str, typer.Argument(help="The Slack channel's id (C…), or the endpoint's URL.")
    ],
    as_json: AsJson = False,
) -> None:
    """Send the tenant's alerts to TARGET through the connection. Needs policy:write and the
    scopes to execute slack.post_message or webhook.post (the alerts run with this key's)."""
    shown = call(local_settings(), "PUT", PATH, {"connection_id": connection_id, "target": target})
    print_json(shown) if as_json else _print(shown)


@route_app.command("show", cls=AsTenant)
def show(as_json: AsJson = False) -> None:
    """The tenant's own alert route."""
    shown = call(local_settings(), "GET", PATH)
    print_json(shown) if as_json else _print(shown)


@route_app.command("clear", cls=AsTenant)
def clear() -> None:
    """Send the tenant's alerts to the deployment's route again."""
    call(local_settings(), "DELETE", PATH)
    out.print("alert route cleared")
