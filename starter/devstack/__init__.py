"""``moat up`` and the test suite's servers: embedded PostgreSQL and the Temporal dev server
(the wheels of the ``embedded`` extra), child processes and their supervision, and what the
local stack keeps in ``$MOAT_HOME``."""

from starter.devstack.postgres import EmbeddedPostgres
from starter.devstack.processes import free_port, serve_asgi
from starter.devstack.temporal import TemporalDevServer, local_temporal, temporal_binary

__all__ = [
    "EmbeddedPostgres",
    "TemporalDevServer",
    "free_port",
    "local_temporal",
    "serve_asgi",
    "temporal_binary",
]
