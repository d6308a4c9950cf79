"""Floor 2, deterministic orchestration: no I/O, no clock, no randomness. Workflows import
``schemas`` and the SDK only, and name their activities (``schemas.names``)."""

from workflows.execute import ExecuteCapability
from workflows.probe import RunProbe
from workflows.retention import ManifestRetention
from workflows.trust import RefreshTrust

__all__ = ["ExecuteCapability", "ManifestRetention", "RefreshTrust", "RunProbe"]
