"""The trust rollup: outcome events summed per tenant, capability version, kind of traffic
and minute; and the two ways of reading a window's counts (from the rollup, bounded by
the number of minutes; from the raw events, for checking it and for what the rollup
replaced).

A refresh rebuilds every minute bucket that holds an event recorded since the tenant's
last refresh (less a margin for transactions that committed late), whole, from the raw
events: running it twice, or over the same minutes again, changes nothing.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from schemas.trust import (
    EXCLUDED_TAXONOMIES,
    HALF_WEIGHT_TAXONOMY,
    LATENCY_BUCKET_RATIO,
    TrustCounts,
)
from store import tenancy, tenants

# A transaction that wrote an outcome event may commit this long after its
# ``recorded_at`` (its start) and still be read by the next refresh.
COMMIT_MARGIN = timedelta(minutes=5)

_EXCLUDED = "o.error_taxonomy IN ({})".format(", ".join(f"'{t}'" for t in EXCLUDED_TAXONOMIES))
_BUCKET = (
    "CASE WHEN o.latency_ms < 1 THEN 0 "
    f"ELSE 1 + floor(ln(o.latency_ms::float8) / ln({LATENCY_BUCKET_RATIO}))::int END"
)

REFRESH = text(
    f"""
WITH touched AS (
    SELECT DISTINCT capability_id, capability_version, is_synthetic,
           date_trunc('minute', "timestamp") AS bucket
    FROM outcome_events
    WHERE tenant_id = :tenant AND recorded_at >= :since
),
ev AS (
    SELECT o.capability_id, o.capability_version, o.is_synthetic, t.bucket, o.success,
           o.error_taxonomy, o.latency_ms, o."timestamp", {_EXCLUDED} AS excluded
    FROM touched t
    JOIN outcome_events o
      ON o.tenant_id = :tenant AND o.capability_id = t.capability_id
     AND o.capability_version = t.capability_version AND o.is_synthetic = t.is_synthetic
     AND o."timestamp" >= t.bucket AND o."timestamp" < t.bucket + interval '1 minute'
),
base AS (
    SELECT capability_id, capability_version, is_synthetic, bucket,
           count(*) FILTER (WHERE NOT excluded) AS samples,
           count(*) FILTER (WHERE success AND NOT excluded) AS successes,
           count(*) FILTER (WHERE error_taxonomy = '{HALF_WEIGHT_TAXONOMY}') AS rate_limited,
           count(*) FILTER (WHERE excluded) AS excluded,
           max("timestamp") FILTER (WHERE success) AS last_success_at,
           max("timestamp") FILTER (WHERE NOT success AND NOT excluded) AS last_failure_at
    FROM ev GROUP BY 1, 2, 3, 4
),
errs AS (
    SELECT capability_id, capability_version, is_synthetic, bucket,
           jsonb_object_agg(error_taxonomy, n) AS errors
    FROM (SELECT capability_id, capability_version, is_synthetic, bucket, error_taxonomy,
                 count(*) AS n
          FROM ev WHERE error_taxonomy <> 'none' GROUP BY 1, 2, 3, 4, 5) e
    GROUP BY 1, 2, 3, 4
),
hist AS (
    SELECT capability_id, capability_version, is_synthetic, bucket,
           jsonb_object_agg(b, n) AS latency_histogram
    FROM (SELECT capability_id, capability_version, is_synthetic, bucket,
                 {_BUCKET.replace("o.", "ev.")} AS b, count(*) AS n
          FROM ev WHERE NOT excluded GROUP BY 1, 2, 3, 4, 5) h
    GROUP BY 1, 2, 3, 4
)
INSERT INTO trust_rollup (tenant_id, capability_id, capability_version, is_synthetic, bucket,
                          samples, successes, rate_limited, excluded, errors,
                          latency_histogram, last_success_at, last_failure_at)
SELECT :tenant, b.capability_id, b.capability_version, b.is_synthetic, b.bucket,
       b.samples, b.successes, b.rate_limited, b.excluded,
       coalesce(e.errors, '{{}}'), coalesce(h.latency_histogram, '{{}}'),
       b.last_success_at, b.last_failure_at
FROM base b
LEFT JOIN errs e USING (capability_id, capability_version, is_synthetic, bucket)
LEFT JOIN hist h USING (capability_id, capability_version, is_synthetic, bucket)
"""
)


async def refreshed_at(session: AsyncSession, tenant_id: str) -> datetime | None:
    """Up to when the tenant's rollup has read (None: never refreshed)."""
    row = await session.execute(
        text("SELECT refreshed_at FROM trust_refresh WHERE tenant_id = :tenant"),
        {"tenant": tenant_id},
    )
    value: datetime | None = row.scalar_one_or_none()
    return value


async def refresh(session: AsyncSession, tenant_id: str) -> datetime:
    """Rebuild the tenant's minute buckets that hold events recorded since its last
    refresh; returns the new mark. The caller's transaction is scoped to the tenant."""
    now: datetime = (await session.execute(text("SELECT now()"))).scalar_one()
    last = await refreshed_at(session, tenant_id)
    since = (last - COMMIT_MARGIN) if last is not None else datetime.min.replace(tzinfo=now.tzinfo)
    await session.execute(
        text(
            """
DELETE FROM trust_rollup r USING (
    SELECT DISTINCT capability_id, capability_version, is_synthetic,
           date_trunc('minute', "timestamp") AS bucket
    FROM outcome_events WHERE tenant_id = :tenant AND recorded_at >= :since) t
WHERE r.tenant_id = :tenant AND r.capability_id = t.capability_id
  AND r.capability_version = t.capability_version AND r.is_synthetic = t.is_synthetic
  AND r.bucket = t.bucket
"""
        ),
        {"tenant": tenant_id, "since": since},
    )
    # Its own statement: the parts of one statement share a snapshot, so an insert beside
    # the delete would still meet the rows it replaces.
    await session.execute(REFRESH, {"tenant": tenant_id, "since": since})
    await session.execute(
        text(
            "INSERT INTO trust_refresh (tenant_id, refreshed_at) VALUES (:tenant, :now) "
            "ON CONFLICT (tenant_id) DO UPDATE SET refreshed_at = excluded.refreshed_at"
        ),
        {"tenant": tenant_id, "now": now},
    )
    return now


_ROLLUP_FILTER = (
    "tenant_id = :tenant AND bucket >= :since AND bucket < :until "
    "AND (CAST(:capability AS text) IS NULL OR capability_id = :capability)"
)
_KEY = "capability_id, capability_version, is_synthetic"


async def rollup_counts(
    session: AsyncSession,
    tenant_id: str,
    since: datetime,
    until: datetime,
    capability_id: str | None = None,
) -> list[TrustCounts]:
    """A window's counts from the rollup: at most one row per minute of the window per
    capability version and kind of traffic is read, whatever the traffic."""
    args = {"tenant": tenant_id, "since": since, "until": until, "capability": capability_id}
    base = await session.execute(
        text(
            f"SELECT {_KEY}, sum(samples), sum(successes), sum(rate_limited), sum(excluded), "
            f"max(last_success_at), max(last_failure_at) FROM trust_rollup "
            f"WHERE {_ROLLUP_FILTER} GROUP BY 1, 2, 3"
        ),
        args,
    )
    counts = {
        (r[0], r[1], r[2]): TrustCounts(
            capability_id=r[0],
            capability_version=r[1],
            is_synthetic=r[2],
            samples=r[3],
            successes=r[4],
            rate_limited=r[5],
            excluded=r[6],
            last_success_at=r[7],
            last_failure_at=r[8],
        )
        for r in base.all()
    }
    for column, field in (("errors", "errors"), ("latency_histogram", "latency_histogram")):
        rows = await session.execute(
            text(
                f"SELECT {_KEY}, kv.key, sum(kv.value::int) FROM trust_rollup, "
                f"jsonb_each_text({column}) kv WHERE {_ROLLUP_FILTER} GROUP BY 1, 2, 3, 4"
            ),
            args,
        )
        for cap, ver, syn, key, total in rows.all():
            target: dict[Any, int] = getattr(counts[(cap, ver, syn)], field)
            target[int(key) if field == "latency_histogram" else key] = int(total)
    return list(counts.values())


async def raw_counts(
    session: AsyncSession,
    tenant_id: str,
    since: datetime,
    until: datetime,
    capability_id: str | None = None,
) -> list[TrustCounts]:
    """The same counts from the raw events, with exact percentiles (``percentile_cont``):
    reads every event of the window, over the month partitions it spans."""
    args = {"tenant": tenant_id, "since": since, "until": until, "capability": capability_id}
    where = (
        'o.tenant_id = :tenant AND o."timestamp" >= :since AND o."timestamp" < :until '
        "AND (CAST(:capability AS text) IS NULL OR o.capability_id = :capability)"
    )
    cols = "o.capability_id, o.capability_version, o.is_synthetic"
    base = await session.execute(
        text(
            f"""
SELECT {cols},
       count(*) FILTER (WHERE NOT {_EXCLUDED}),
       count(*) FILTER (WHERE o.success AND NOT {_EXCLUDED}),
       count(*) FILTER (WHERE o.error_taxonomy = '{HALF_WEIGHT_TAXONOMY}'),
       count(*) FILTER (WHERE {_EXCLUDED}),
       max(o."timestamp") FILTER (WHERE o.success),
       max(o."timestamp") FILTER (WHERE NOT o.success AND NOT {_EXCLUDED}),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY o.latency_ms) FILTER (WHERE NOT {_EXCLUDED}),
       percentile_cont(0.95) WITHIN GROUP (ORDER BY o.latency_ms) FILTER (WHERE NOT {_EXCLUDED}),
       percentile_cont(0.99) WITHIN GROUP (ORDER BY o.latency_ms) FILTER (WHERE NOT {_EXCLUDED})
FROM outcome_events o WHERE {where} GROUP BY 1, 2, 3
"""
        ),
        args,
    )
    counts: dict[tuple[str, str, bool], TrustCounts] = {}
    for r in base.all():
        exact = {name: v for name, v in (("p50", r[9]), ("p95", r[10]), ("p99", r[11])) if v}
        counts[(r[0], r[1], r[2])] = TrustCounts(
            capability_id=r[0],
            capability_version=r[1],
            is_synthetic=r[2],
            samples=r[3],
            successes=r[4],
            rate_limited=r[5],
            excluded=r[6],
            last_success_at=r[7],
            last_failure_at=r[8],
            exact_percentiles={k: float(v) for k, v in exact.items()},
        )
    errors = await session.execute(
        text(
            f"SELECT {cols}, o.error_taxonomy, count(*) FROM outcome_events o "
            f"WHERE {where} AND o.error_taxonomy <> 'none' GROUP BY 1, 2, 3, 4"
        ),
        args,
    )
    for cap, ver, syn, code, n in errors.all():
        counts[(cap, ver, syn)].errors[code] = n
    return list(counts.values())


def rows_per_query(window: timedelta, versions: int) -> int:
    """The most rollup rows a score reads: one per minute, capability version and kind of
    traffic (twice: the window and the one before it, for the trend)."""
    return 2 * int(window.total_seconds() // 60) * versions * 2


async def tenant_ids(sessions: async_sessionmaker[AsyncSession]) -> list[str]:
    async with sessions.begin() as session:
        return [t.id for t in await tenants.list_tenants(session)]


async def platform_counts(
    sessions: async_sessionmaker[AsyncSession],
    windows: list[tuple[datetime, datetime]],
    capability_id: str | None = None,
) -> tuple[list[list[TrustCounts]], datetime | None]:
    """Every tenant's rollup counts for each window (one transaction per tenant, so
    row-level security holds), and the oldest refresh mark among them."""
    per_window: list[list[TrustCounts]] = [[] for _ in windows]
    oldest: datetime | None = None
    for tenant_id in await tenant_ids(sessions):
        async with tenancy.tenant_transaction(sessions, tenant_id) as session:
            mark = await refreshed_at(session, tenant_id)
            if mark is None:
                continue
            oldest = mark if oldest is None else min(oldest, mark)
            for i, (since, until) in enumerate(windows):
                per_window[i] += await rollup_counts(
                    session, tenant_id, since, until, capability_id
                )
    return per_window, oldest
