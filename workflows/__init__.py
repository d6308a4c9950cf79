"""Floor 2, deterministic orchestration: no I/O, no clock, no randomness. Workflows import
``schemas`` and the SDK only, and name their activities (``schemas.names``)."""

from workflows.deliver import DeliverWebhook
from workflows.execute import ExecuteCapability
from workflows.partitions import OutcomePartitions
from workflows.probe import RunProbe
from workflows.retention import ManifestRetention
from workflows.trust import RefreshTrust

__all__ = [
    "DeliverWebhook",
    "ExecuteCapability",
    "ManifestRetention",
    "OutcomePartitions",
    "RefreshTrust",
    "RunProbe",
]
