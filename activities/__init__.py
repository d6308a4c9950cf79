"""Every side effect of a run: policy, adapters, outcome records."""

from activities.adapters import Adapter, HostGuard, HttpAdapter, echo_adapter, http_client
from activities.execute import ExecuteActivities
from activities.manifest import ManifestActivities
from activities.partitions import PartitionActivities
from activities.retention import RetentionActivities

__all__ = [
    "Adapter",
    "ExecuteActivities",
    "HostGuard",
    "HttpAdapter",
    "ManifestActivities",
    "PartitionActivities",
    "RetentionActivities",
    "echo_adapter",
    "http_client",
]
