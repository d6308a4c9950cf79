"""API key scopes: what a tenant's key may do.

A scope is ``<area>:<action or name>``, e.g. ``execute:slack.post_message`` or
``policy:write``. A key's scope ending in ``*`` grants every scope starting with what comes
before it (``execute:*`` grants every capability; ``*`` alone grants everything).
Executing a capability always needs ``execute:<capability id>``, besides the capability's
own ``required_scopes``."""

from __future__ import annotations

import re
from collections.abc import Iterable

SCOPE_PATTERN = r"^(?:\*|[a-z][a-z0-9_-]*:(?:\*|[A-Za-z0-9_.-]+\*?))$"
MAX_SCOPE_LENGTH = 200
EXECUTE_ALL = "execute:*"
CONNECTIONS_WRITE = "connections:write"
POLICY_WRITE = "policy:write"
APPROVALS_WRITE = "approvals:write"
# Writes that set something in motion or change what the tenant receives.
WEBHOOKS_WRITE = "webhooks:write"
DEAD_LETTERS_WRITE = "dead_letters:write"
PROBES_WRITE = "probes:write"
# Resuming or cancelling a plan (running one needs only its steps' execute scopes).
PLANS_WRITE = "plans:write"
# Reads that expose what executions answered (outputs, manifests) or what a person is asked
# to approve (an approval's input).
OUTPUTS_READ = "outputs:read"
APPROVALS_READ = "approvals:read"
# The tenant's transparency log: its checkpoints, proofs and key (read), and adding a
# witness's cosignature of a checkpoint.
LOG_READ = "log:read"
LOG_COSIGN = "log:cosign"
# A tenant's people: who they are and their scopes (read), adding, changing, disabling them.
PEOPLE_READ = "people:read"
PEOPLE_WRITE = "people:write"
# What a key gets when created without scopes: execute anything and read what it executed.
# A key older than read scopes holds ``outputs:read`` (and ``approvals:read`` when it can
# decide approvals), granted by the migration that introduced them: no caller loses a read
# it had, and none holds a write scope it was not given.
DEFAULT_SCOPES: tuple[str, ...] = (EXECUTE_ALL, OUTPUTS_READ)

_SCOPE = re.compile(SCOPE_PATTERN)


def valid_scope(scope: str) -> bool:
    return len(scope) <= MAX_SCOPE_LENGTH and _SCOPE.fullmatch(scope) is not None


def grants(granted: str, required: str) -> bool:
    """Whether one granted scope (possibly ending in ``*``) covers ``required``."""
    if granted.endswith("*"):
        return required.startswith(granted[:-1])
    return granted == required


def missing_scopes(granted: Iterable[str], required: Iterable[str]) -> list[str]:
    """The required scopes none of ``granted`` covers, in order."""
    held = list(granted)
    return [r for r in required if not any(grants(g, r) for g in held)]


def execute_scope(capability_id: str) -> str:
    return f"execute:{capability_id}"


def capability_scopes(capability_id: str, required_scopes: Iterable[str]) -> list[str]:
    """Every scope executing a capability needs: its execute scope, then its own."""
    needed = [execute_scope(capability_id)]
    needed += [s for s in required_scopes if s not in needed]
    return needed
