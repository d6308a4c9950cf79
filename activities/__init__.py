"""Every side effect of a run: policy, adapters, outcome records."""

from activities.adapters import Adapter, HostGuard, HttpAdapter, echo_adapter, http_client
from activities.approvals import ApprovalActivities
from activities.execute import ExecuteActivities
from activities.manifest import ManifestActivities
from activities.retention import RetentionActivities

__all__ = [
    "Adapter",
    "ApprovalActivities",
    "ExecuteActivities",
    "HostGuard",
    "HttpAdapter",
    "ManifestActivities",
    "RetentionActivities",
    "echo_adapter",
    "http_client",
]
