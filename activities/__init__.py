"""Every side effect of a run: policy, adapters, outcome records."""

from activities.adapters import HostGuard, HttpAdapter, echo_adapter
from activities.execute import ExecuteActivities

__all__ = ["ExecuteActivities", "HostGuard", "HttpAdapter", "echo_adapter"]
