"""The long-running processes: ``moat up`` (everything, embedded) and ``moat down``,
``moat worker``, ``moat gateway``; and ``moat migrate``."""

from __future__ import annotations

from typing import Annotated

import typer

from schemas.settings import MoatSettings
from starter.cli.output import out
from starter.devstack.ports import local_settings


def up(
    fake_providers: Annotated[
        bool,
        typer.Option(
            "--fake-providers",
            help="Also start local fakes of Slack, GitHub and a webhook receiver (their "
            "addresses are printed and allow-listed for the worker): try the adapters offline.",
        ),
    ] = False,
) -> None:
    """Run the whole stack on embedded defaults until Ctrl-C.

    Temporal dev server and its UI, PostgreSQL, migrations, one worker and the gateway."""
    from starter.devstack.up import run_up

    raise typer.Exit(run_up(MoatSettings(), fake_providers=fake_providers))


def down() -> None:
    """Stop what moat up started in this MOAT_HOME.

    The moat up process stops its children in order, as on Ctrl-C; any of its processes
    left running (a moat up killed outright) are stopped after it. Says what it stopped;
    nothing running is no error."""
    from starter.devstack.down import stop_stack

    settings = MoatSettings()
    stopped = stop_stack(settings)
    if not stopped:
        out.print(f"nothing to stop: no moat up running in {settings.home.absolute()}")
        return
    for member in stopped:
        how = " (it did not stop in time: killed)" if member.killed else ""
        out.print(f"stopped {member.name} (pid {member.pid}){how}", highlight=False)


def worker() -> None:
    """Run one Temporal worker against the configured Temporal and Postgres."""
    from starter.runtime import loop
    from starter.runtime.worker_process import run

    loop.run(run(MoatSettings()))


def gateway() -> None:
    """Run the HTTP gateway against the configured Temporal and Postgres.

    With MOAT_ADMIN_PORT set, the admin routes listen on that port only."""
    from starter.gateway import serve
    from starter.runtime import loop

    raise typer.Exit(loop.run(serve(MoatSettings())))


def migrate() -> None:
    """Apply database migrations (as the owner role)."""
    from store import upgrade

    upgrade(local_settings().sqlalchemy_url)
    out.print("migrations applied")
