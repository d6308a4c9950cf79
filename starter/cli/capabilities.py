"""``moat capabilities``: the gateway's catalog as the tenant's agents see it (effect type,
how a repeat is kept from a second effect, the connections a call may name, approval), and
one capability's input schema."""

from __future__ import annotations

import difflib
import json
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from starter.cli.agent import agent_client, gateway_answers
from starter.cli.output import AsJson, fail, id_column, out, print_json
from starter.devstack.ports import local_settings

if TYPE_CHECKING:
    from moat_client import CapabilityInfo

# From this many columns the table also shows each capability's version.
WIDE = 100


def capabilities(
    capability: Annotated[
        str | None,
        typer.Argument(help="A capability id: show it with its input schema. Unset: all."),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """The capabilities the gateway executes; with an ID, one of them and its input schema."""
    settings = local_settings()
    client = agent_client(settings)
    with gateway_answers(settings):
        catalog = client.capabilities()
    if capability is None:
        if as_json:
            print_json([c.model_dump(mode="json") for c in catalog])
        else:
            out.print(_table(catalog))
        return
    versions = [c for c in catalog if c.id == capability]
    if not versions:
        close = difflib.get_close_matches(capability, sorted({c.id for c in catalog}), n=3)
        guess = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise fail(
            "capability_not_found",
            f"No capability {capability!r}{guess}",
            "`moat capabilities` lists them",
            details={"did_you_mean": close} if close else None,
        )
    if as_json:
        print_json([c.model_dump(mode="json") for c in versions])
        return
    for info in versions:
        _detail(info)


def _approval(info: CapabilityInfo) -> str:
    return "always" if info.requires_approval else "by policy"


def _table(catalog: list[CapabilityInfo]) -> Table:
    """One capability version a row. At 80 columns the version is left to
    ``moat capabilities ID`` unless a capability has several: nothing else is cut."""
    versions = any(sum(c.id == info.id for c in catalog) > 1 for info in catalog)
    headers = ("version",) if versions or out.width >= WIDE else ()
    table = Table()
    id_column(table, "id", (info.id for info in catalog))
    for header in (*headers, "effect", "idempotency", "connections", "approval"):
        table.add_column(header, overflow="fold")
    for info in catalog:
        table.add_row(
            escape(info.id),
            *((escape(info.version),) if headers else ()),
            escape(info.effect_type),
            escape(info.idempotency),
            escape(", ".join(info.connection_types) or "-"),
            _approval(info),
        )
    return table


def _detail(info: CapabilityInfo) -> None:
    """One version of a capability, field by field, then its input schema."""
    out.print(f"[bold]{escape(info.id)}[/] {escape(info.version)}")
    fields = {
        "description": info.description,
        "effect": info.effect_type,
        "idempotency": info.idempotency,
        "connections": ", ".join(info.connection_types) or "-",
        "approval": _approval(info),
        "scopes": ", ".join(info.required_scopes),
        "timeout": f"{info.timeout_seconds:g} s",
    }
    for name, value in fields.items():
        out.print(f"  {name:<12} {escape(value)}", soft_wrap=True, highlight=False)
    out.print("  input schema:")
    out.print_json(json.dumps(info.input_schema), indent=2)
