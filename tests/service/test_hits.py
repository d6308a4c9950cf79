"""Idempotent hits counted in memory between flushes: bounded in distinct executions
(past the bound, counted as dropped rather than held)."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import async_sessionmaker

from starter.service.executions.hits import HitLedger


def test_distinct_executions_past_the_bound_are_dropped_not_held() -> None:
    ledger = HitLedger(async_sessionmaker(), max_pending=2)
    now = datetime.now(UTC)
    for receipt in ("a", "b", "c", "a"):
        ledger.note("t", receipt, "demo.echo", receipt, now)
    assert (ledger.pending, ledger.dropped) == (3, 1)
