"""``moat up`` and the test suite's servers: embedded PostgreSQL and the Temporal dev server
(the wheels of the ``embedded`` extra), child processes and their supervision, and what the
local stack keeps in ``$MOAT_HOME``.

The names below are loaded on first use: a CLI command that reads the stack's ports from
``starter.devstack.ports`` does not load Temporal's SDK or the database driver."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starter.devstack.postgres import EmbeddedPostgres
    from starter.devstack.processes import free_port, serve_asgi
    from starter.devstack.temporal import TemporalDevServer, local_temporal, temporal_binary

_HOMES = {
    "EmbeddedPostgres": "starter.devstack.postgres",
    "free_port": "starter.devstack.processes",
    "serve_asgi": "starter.devstack.processes",
    "TemporalDevServer": "starter.devstack.temporal",
    "local_temporal": "starter.devstack.temporal",
    "temporal_binary": "starter.devstack.temporal",
}

__all__ = [
    "EmbeddedPostgres",
    "TemporalDevServer",
    "free_port",
    "local_temporal",
    "serve_asgi",
    "temporal_binary",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
