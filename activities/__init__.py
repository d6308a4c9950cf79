"""Every side effect of a run: policy, adapters, outcome records."""

from activities.adapters import Adapter, HostGuard, HttpAdapter, echo_adapter, http_client
from activities.execute import ExecuteActivities
from activities.manifest import ManifestActivities
from activities.probes import ProbeActivities
from activities.retention import RetentionActivities
from activities.trust import TrustActivities

__all__ = [
    "Adapter",
    "ExecuteActivities",
    "HostGuard",
    "HttpAdapter",
    "ManifestActivities",
    "ProbeActivities",
    "RetentionActivities",
    "TrustActivities",
    "echo_adapter",
    "http_client",
]
