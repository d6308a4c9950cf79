"""Every side effect of a run: policy, adapters, outcome records."""

from activities.adapters import (
    Adapter,
    GithubAdapter,
    GithubCloseIssueAdapter,
    GithubRateLimitAdapter,
    HostGuard,
    HttpAdapter,
    SlackAdapter,
    SlackAuthTestAdapter,
    SlackDeleteMessageAdapter,
    SlackUpdateMessageAdapter,
    WebhookAdapter,
    echo_adapter,
    http_client,
)
from activities.alerts import AlertActivities, Alerter
from activities.announce import AnnounceActivities, Announcer
from activities.approvals import ApprovalActivities
from activities.cancels import CancelSweep
from activities.connections import StoreConnectionResolver
from activities.execute.adapter import AdapterStep
from activities.execute.policy import PolicyStep
from activities.execute.record import RecordStep
from activities.manifest import ManifestActivities
from activities.partitions import PartitionActivities
from activities.plans import PlanActivities
from activities.probes import ProbeActivities
from activities.retention import RetentionActivities
from activities.translog import LogActivities
from activities.trust import TrustActivities
from activities.webhooks import DeliveryActivities

__all__ = [
    "Adapter",
    "AdapterStep",
    "AlertActivities",
    "Alerter",
    "AnnounceActivities",
    "Announcer",
    "ApprovalActivities",
    "CancelSweep",
    "DeliveryActivities",
    "GithubAdapter",
    "GithubCloseIssueAdapter",
    "GithubRateLimitAdapter",
    "HostGuard",
    "HttpAdapter",
    "LogActivities",
    "ManifestActivities",
    "PartitionActivities",
    "PlanActivities",
    "PolicyStep",
    "ProbeActivities",
    "RecordStep",
    "RetentionActivities",
    "SlackAdapter",
    "SlackAuthTestAdapter",
    "SlackDeleteMessageAdapter",
    "SlackUpdateMessageAdapter",
    "StoreConnectionResolver",
    "TrustActivities",
    "WebhookAdapter",
    "echo_adapter",
    "http_client",
]
