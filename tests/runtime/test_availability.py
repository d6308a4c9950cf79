"""Which failures say a dependency is briefly away (503) and which are faults (500)."""

from __future__ import annotations

import pytest
from temporalio.service import RPCError, RPCStatusCode

from starter.runtime.availability import away


@pytest.mark.parametrize(
    ("message", "status"),
    [
        ("transport error", RPCStatusCode.UNKNOWN),  # the frontend killed mid long-poll
        ("connection refused", RPCStatusCode.UNAVAILABLE),
        ("deadline", RPCStatusCode.DEADLINE_EXCEEDED),
        ("busy", RPCStatusCode.RESOURCE_EXHAUSTED),
    ],
)
def test_temporal_out_of_reach_is_away(message: str, status: RPCStatusCode) -> None:
    assert away(RPCError(message, status, b"")) == "temporal"


def test_temporal_lost_under_another_exception_is_away() -> None:
    try:
        try:
            raise RPCError("transport error", RPCStatusCode.UNKNOWN, b"")
        except RPCError as lost:
            raise RuntimeError("while waiting for the result") from lost
    except RuntimeError as outer:
        assert away(outer) == "temporal"


@pytest.mark.parametrize(
    ("message", "status"),
    [
        ("some other failure", RPCStatusCode.UNKNOWN),
        ("bad request", RPCStatusCode.INVALID_ARGUMENT),
        ("not found", RPCStatusCode.NOT_FOUND),
    ],
)
def test_a_call_temporal_refuses_is_a_fault(message: str, status: RPCStatusCode) -> None:
    assert away(RPCError(message, status, b"")) is None
