"""Every side effect of a run: policy, adapters, outcome records."""

from activities.adapters import Adapter, HostGuard, HttpAdapter, echo_adapter
from activities.execute import ExecuteActivities
from activities.manifest import ManifestActivities

__all__ = [
    "Adapter",
    "ExecuteActivities",
    "HostGuard",
    "HttpAdapter",
    "ManifestActivities",
    "echo_adapter",
]
