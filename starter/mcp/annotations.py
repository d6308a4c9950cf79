"""What each tool tells an MCP host about its effect (``ToolAnnotations``), truthfully.

- ``readOnlyHint``: the capability changes nothing (effect type ``NONE``).
- ``destructiveHint``: its effect cannot be undone: no capability in the catalog undoes it
  (a posted message has been read, a sent email is in the inbox).
- ``idempotentHint``: always true: a repeated call with the same key is one effect.
- ``openWorldHint``: it reaches a provider outside Moat (``demo.echo`` and Moat's own
  tools do not).

Whether a capability's effect can be undone is a fact about the catalog, stated here per
capability; one this table does not know is judged by its effect type alone: one with an
effect counts as destructive, since nothing is known to undo it.
"""

from __future__ import annotations

import mcp_types as types
from moat_client import CapabilityInfo

# Capabilities whose effect a capability of the catalog undoes, and with which.
UNDONE_BY: dict[str, str] = {
    "github.create_issue": "github.close_issue",
    "notion.create_page": "notion.update_page",  # archived: true moves it to the trash
}
# Capabilities that never leave Moat.
CLOSED_WORLD = frozenset({"demo.echo"})


def capability_annotations(capability: CapabilityInfo) -> types.ToolAnnotations:
    read_only = capability.effect_type.upper() == "NONE"
    return types.ToolAnnotations(
        read_only_hint=read_only,
        destructive_hint=not read_only and capability.id not in UNDONE_BY,
        idempotent_hint=True,
        open_world_hint=capability.id not in CLOSED_WORLD,
    )


def moat_annotations(*, read_only: bool, destructive: bool = False) -> types.ToolAnnotations:
    """Moat's own tools (approvals, status): they act on Moat only."""
    return types.ToolAnnotations(
        read_only_hint=read_only,
        destructive_hint=destructive,
        idempotent_hint=True,
        open_world_hint=False,
    )
