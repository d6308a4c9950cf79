"""Deterministic orchestration: no I/O, no clock, no randomness."""

from workflows.execute import (
    CALL_ADAPTER,
    CHECK_POLICY,
    RECORD_OUTCOME,
    WRITE_MANIFEST,
    ExecuteCapability,
)
from workflows.retention import EXPIRE_MANIFESTS, ManifestRetention

__all__ = [
    "CALL_ADAPTER",
    "CHECK_POLICY",
    "EXPIRE_MANIFESTS",
    "RECORD_OUTCOME",
    "WRITE_MANIFEST",
    "ExecuteCapability",
    "ManifestRetention",
]
