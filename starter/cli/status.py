"""``moat status``: what ``moat up`` runs in this home, where, and on which ports."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Column, Table

from schemas.settings import MoatSettings
from starter.cli.output import AsJson, out
from starter.devstack.status import stack_status


def status(as_json: AsJson = False) -> None:
    """Print the local stack's processes (alive or not), their addresses and ports; exit 1
    when no moat up runs in MOAT_HOME."""
    report = stack_status(MoatSettings())
    if as_json:
        out.print_json(report.model_dump_json())
    else:
        if not report.running:
            out.print(f"no `moat up` running in {report.home}")
        # An address is whole, never cut: it is what the next command or browser is given
        # (its port is in it; --json has the port alone).
        # The pid column is as wide as the widest pid (7 digits), so the table's layout is
        # the same whatever pids a machine hands out.
        table = Table(
            Column("", overflow="fold"),
            Column("pid", min_width=7),
            "state",
            Column("address", no_wrap=True, overflow="ignore"),
        )
        for m in report.members:
            state = "[green]up[/]" if m.alive else "[red]down[/]"
            table.add_row(m.name, str(m.pid or "-"), state, m.url or "")
        if report.members:
            # The home on a line of its own: a folder's path is never wrapped or cut.
            out.print(f"moat up in {escape(report.home)}", soft_wrap=True, highlight=False)
            out.print(table)
    raise typer.Exit(0 if report.running else 1)
