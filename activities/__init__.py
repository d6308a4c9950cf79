"""Every side effect of a run: policy, adapters, outcome records."""

from activities.adapters import Adapter, HostGuard, HttpAdapter, echo_adapter, http_client
from activities.execute import ExecuteActivities
from activities.manifest import ManifestActivities
from activities.retention import RetentionActivities
from activities.webhooks import DeliveryActivities

__all__ = [
    "Adapter",
    "DeliveryActivities",
    "ExecuteActivities",
    "HostGuard",
    "HttpAdapter",
    "ManifestActivities",
    "RetentionActivities",
    "echo_adapter",
    "http_client",
]
