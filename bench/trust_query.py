"""Trust query latency over many outcome events, with and without the rollup.

    .venv/bin/python -m bench.trust_query [--events 1000000] [--capabilities 5] [--runs 15]

Starts its own embedded PostgreSQL in a temporary folder (on loopback, migrated), writes
``--events`` outcome events for one tenant spread over the last 30 days across
``--capabilities`` capabilities (real and synthetic, a realistic error mix, latencies from
a log-normal), refreshes the rollup once from scratch (timed), then times the score of one
capability and of all of them over 24 h and 30 d, from the rollup (``store.trust.
rollup_counts``) and from the raw events (``store.trust.raw_counts``, ``percentile_cont``
over the month partitions). Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from schemas.settings import MoatSettings
from schemas.trust import TrustWindow
from starter.devstack import EmbeddedPostgres, free_port
from store import make_engine, make_sessionmaker, tenancy, tenants, trust, upgrade

# 92 % success, the rest spread over the taxonomy; 1 % gateway errors and denials each.
FILL = """
INSERT INTO outcome_events (id, "timestamp", receipt_id, tenant_id, capability_id,
    capability_version, adapter_id, success, latency_ms, error_taxonomy, http_status,
    is_synthetic, recorded_at)
SELECT 'e' || g, ts, 'r' || g, :tenant,
       'cap.' || (g % :caps), '1.0.0', 'bench', t.tax = 'none',
       greatest(1, exp(4.5 + random() * 1.5 + (CASE WHEN random() < 0.02 THEN 2 ELSE 0 END)))::int,
       t.tax, NULL, g % 7 = 0, ts
FROM generate_series(1, :n) g
CROSS JOIN LATERAL (SELECT :now - (random() * interval '30 days') + g * interval '0' AS ts) w
CROSS JOIN LATERAL (SELECT CASE
    WHEN r < 0.92 THEN 'none' WHEN r < 0.94 THEN 'provider_rate_limited'
    WHEN r < 0.96 THEN 'provider_server_error' WHEN r < 0.97 THEN 'timeout'
    WHEN r < 0.98 THEN 'network_error' WHEN r < 0.99 THEN 'gateway_error'
    ELSE 'policy_denied' END AS tax FROM (SELECT random() + g * 0 AS r) x) t
"""


async def _timed(runs: int, call: Callable[[], Awaitable[Any]]) -> tuple[float, float, int]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        await call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), max(times), runs


async def measure(args: argparse.Namespace, url: str) -> dict[str, Any]:
    engine = make_engine(MoatSettings(database_url=url).sqlalchemy_url)
    sessions: async_sessionmaker[AsyncSession] = make_sessionmaker(engine)
    now = datetime.now(UTC)
    async with sessions.begin() as session:
        tenant = (await tenants.create_tenant(session, "bench")).id
        # The months before the migration's: the events of 30 days span two or three.
        for months_back in (1, 2):
            first = (now.replace(day=1) - timedelta(days=31 * months_back - 31)).replace(day=1)
            start = (first - timedelta(days=1)).replace(day=1)
            await session.execute(
                text(
                    f"CREATE TABLE IF NOT EXISTS outcome_events_{start:%Y_%m} PARTITION OF "
                    f"outcome_events FOR VALUES FROM ('{start:%Y-%m-01}') TO ('{first:%Y-%m-01}')"
                )
            )
    started = time.perf_counter()
    async with sessions.begin() as session:
        await session.execute(
            text(FILL), {"now": now, "tenant": tenant, "caps": args.capabilities, "n": args.events}
        )
    fill_s = time.perf_counter() - started
    async with sessions() as session:
        await session.execute(text("ANALYZE outcome_events"))
        await session.commit()
    started = time.perf_counter()
    async with tenancy.tenant_transaction(sessions, tenant) as session:
        await trust.refresh(session, tenant)
    refresh_s = time.perf_counter() - started
    async with sessions() as session:
        await session.execute(text("ANALYZE trust_rollup"))
        await session.commit()
    # One more minute of traffic, as the schedule would find it.
    async with sessions.begin() as session:
        await session.execute(
            text(FILL.replace("interval '30 days'", "interval '1 minute'")),
            {"now": now, "tenant": tenant, "caps": args.capabilities, "n": args.events // 43200},
        )
    started = time.perf_counter()
    async with tenancy.tenant_transaction(sessions, tenant) as session:
        await trust.refresh(session, tenant)
    incremental_ms = (time.perf_counter() - started) * 1000

    rows: list[dict[str, Any]] = []
    for window in (TrustWindow.H24, TrustWindow.D30):
        bounds = window.bounds(now)
        span = window.span_minutes
        for capability in ("cap.0", None):
            async with tenancy.tenant_transaction(sessions, tenant) as session:
                rollup_rows = (
                    await session.execute(
                        text(
                            "SELECT count(*) FROM trust_rollup WHERE tenant_id = :t AND "
                            "span_minutes = :span AND bucket >= :s AND bucket < :u AND "
                            "(CAST(:c AS text) IS NULL OR capability_id = :c)"
                        ),
                        {
                            "t": tenant,
                            "s": bounds[0],
                            "u": bounds[1],
                            "c": capability,
                            "span": span,
                        },
                    )
                ).scalar_one()
                events = (
                    await session.execute(
                        text(
                            "SELECT count(*) FROM outcome_events WHERE tenant_id = :t AND "
                            '"timestamp" >= :s AND "timestamp" < :u AND (CAST(:c AS text) IS '
                            "NULL OR capability_id = :c)"
                        ),
                        {"t": tenant, "s": bounds[0], "u": bounds[1], "c": capability},
                    )
                ).scalar_one()
            for source in ("rollup", "raw"):

                async def once(
                    source: str = source,
                    capability: str | None = capability,
                    span: int = span,
                    bounds: tuple[datetime, datetime] = bounds,
                ) -> None:
                    async with tenancy.tenant_transaction(sessions, tenant) as session:
                        if source == "rollup":
                            await trust.rollup_counts(session, tenant, *bounds, capability, span)
                        else:
                            await trust.raw_counts(session, tenant, *bounds, capability)

                runs = args.runs if source == "rollup" else max(3, args.runs // 3)
                median, worst, n = await _timed(runs, once)
                rows.append(
                    {
                        "window": window.value,
                        "capability": capability or "all",
                        "source": source,
                        "rows_read": rollup_rows if source == "rollup" else events,
                        "median_ms": round(median, 1),
                        "max_ms": round(worst, 1),
                        "runs": n,
                    }
                )
    await engine.dispose()
    return {
        "events": args.events,
        "capabilities": args.capabilities,
        "fill_s": round(fill_s, 1),
        "full_refresh_s": round(refresh_s, 1),
        "incremental_refresh_ms": round(incremental_ms, 1),
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--capabilities", type=int, default=5)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="moat-bench-trust-") as folder:
        pg = EmbeddedPostgres(Path(folder) / "data", free_port(), fast=True)
        url = pg.start()
        try:
            upgrade(MoatSettings(database_url=url).sqlalchemy_url)
            result = asyncio.run(measure(args, url))
        finally:
            pg.stop()
    print(
        f"{result['events']:,} outcome events, {result['capabilities']} capabilities, 30 days; "
        f"written in {result['fill_s']} s; rollup built from scratch in "
        f"{result['full_refresh_s']} s, one more minute of traffic folded in "
        f"{result['incremental_refresh_ms']} ms"
    )
    print(
        f"{'window':>6} {'capability':>10} {'source':>7} {'rows read':>10} "
        f"{'median ms':>10} {'max ms':>8}"
    )
    for row in result["rows"]:
        print(
            f"{row['window']:>6} {row['capability']:>10} {row['source']:>7} "
            f"{row['rows_read']:>10,} {row['median_ms']:>10} {row['max_ms']:>8}"
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
