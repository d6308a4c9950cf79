"""``moat codec``: the address a Temporal Web UI decodes Moat's payloads through (decode
only), and the rotation of its token."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

import typer

from schemas.settings import MoatSettings
from starter.cli.identity import Local
from starter.cli.output import err, out, usage
from starter.devstack.ports import local_settings
from starter.runtime.codec_door import current_token, rotate

codec_app = typer.Typer(
    no_args_is_help=True, help="The Temporal Web UI's codec address (decode only), rotated."
)


def _door_url(settings: MoatSettings, token: str) -> str:
    return f"{settings.local_gateway_url}/codec/ui/{token}"


@codec_app.command("url", cls=Local)
def url() -> None:
    """Print the codec address to give a Temporal Web UI (decode only).

    For the gateway at MOAT_GATEWAY_URL and the door file it reads (MOAT_CODEC_DOOR, else
    the one moat up keeps in MOAT_HOME); set it as the UI's codec.endpoint."""
    settings = local_settings()
    try:
        token = current_token(settings)
    except FileNotFoundError as exc:
        raise usage(
            str(exc),
            "start the stack with `moat up`, or create the door with `moat codec rotate`",
            code="codec_door_missing",
        ) from None
    out.print(_door_url(settings, token), soft_wrap=True)


@codec_app.command("rotate", cls=Local)
def rotate_token(
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
    period ends. Then give the UI the new address (restart moat up, or redeploy it)."""
    settings = local_settings()
    token = rotate(settings, grace=timedelta(seconds=grace))
    out.print(_door_url(settings, token), soft_wrap=True)
    when = f"for {grace} s more" if grace else "no longer"
    err.print(
        f"the previous codec address works {when}; give the Temporal Web UI this one "
        "(`moat up` gives its UI the current one when it starts)"
    )


def url_alias() -> None:
    """Print the codec address to give a Temporal Web UI (the same as moat codec url)."""
    url()
