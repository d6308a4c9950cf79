"""Deterministic orchestration: no I/O, no clock, no randomness."""

from workflows.execute import (
    CALL_ADAPTER,
    CHECK_POLICY,
    RECORD_OUTCOME,
    WRITE_MANIFEST,
    ExecuteCapability,
)

__all__ = [
    "CALL_ADAPTER",
    "CHECK_POLICY",
    "RECORD_OUTCOME",
    "WRITE_MANIFEST",
    "ExecuteCapability",
]
