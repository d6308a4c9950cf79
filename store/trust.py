"""The trust rollup: outcome events summed per tenant, capability version, kind of traffic
and minute; and the two ways of reading a window's counts (from the rollup, bounded by
the number of minutes; from the raw events, for checking it and for what the rollup
replaced).

A refresh rebuilds every minute bucket that holds an event recorded since the tenant's
last refresh (less a margin for transactions that committed late), whole, from the raw
events, then the hours those minutes belong to from their minutes and the days from their
hours: running it twice, or over the same minutes again, changes nothing. Scores over 1 h
and 24 h read minutes (at most 1,440 rows per capability version and kind of traffic),
over 7 d hours (168), over 30 d days (30): the bound does not grow with traffic.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from schemas.trust import (
    EXCLUDED_TAXONOMIES,
    HALF_WEIGHT_TAXONOMY,
    LATENCY_BUCKET_RATIO,
    TrustCounts,
    TrustSlice,
)

# A transaction that wrote an outcome event may commit this long after its
# ``recorded_at`` (its start) and still be read by the next refresh.
COMMIT_MARGIN = timedelta(minutes=5)

_EXCLUDED = "o.error_taxonomy IN ({})".format(", ".join(f"'{t}'" for t in EXCLUDED_TAXONOMIES))
_BUCKET = (
    "CASE WHEN o.latency_ms < 1 THEN 0 "
    f"ELSE 1 + floor(ln(o.latency_ms::float8) / ln({LATENCY_BUCKET_RATIO}))::int END"
)

_KEY = "capability_id, capability_version, is_synthetic"
# The rollup's bucket sizes, in minutes.
MINUTE, HOUR, DAY = 1, 60, 1440
_JOIN_KEY = (
    "{a}.capability_id = {b}.capability_id AND {a}.capability_version = {b}.capability_version "
    "AND {a}.is_synthetic = {b}.is_synthetic"
)

# The minute buckets holding an event recorded since the last refresh (a temporary table:
# the statements below all work on it, and it goes with the transaction).
TOUCHED = text(
    f"""
CREATE TEMPORARY TABLE trust_touched ON COMMIT DROP AS
SELECT DISTINCT {_KEY}, date_trunc('minute', "timestamp", 'UTC') AS bucket
FROM outcome_events WHERE tenant_id = :tenant AND recorded_at >= :since
"""
)
TOUCHED_RANGE = text("SELECT min(bucket), max(bucket) FROM trust_touched")
CLEAR = text(
    f"""
DELETE FROM trust_rollup r USING (
    SELECT {_KEY}, bucket, {MINUTE} AS span_minutes FROM trust_touched
    UNION
    SELECT DISTINCT {_KEY}, date_trunc('hour', bucket, 'UTC'), {HOUR} FROM trust_touched
    UNION
    SELECT DISTINCT {_KEY}, date_trunc('day', bucket, 'UTC'), {DAY} FROM trust_touched) t
WHERE r.tenant_id = :tenant AND {_JOIN_KEY.format(a="r", b="t")}
  AND r.span_minutes = t.span_minutes AND r.bucket = t.bucket
"""
)

_COLUMNS = (
    "tenant_id, capability_id, capability_version, is_synthetic, span_minutes, bucket, "
    "samples, successes, rate_limited, excluded, errors, latency_histogram, last_success_at, "
    "last_failure_at"
)
# One statement per table shape: rows of each part, then their errors and latency
# histograms summed by key.
_SUMMED = f"""
errs AS (
    SELECT {_KEY}, bucket, jsonb_object_agg(k, n) AS errors
    FROM (SELECT {_KEY}, bucket, k, sum(n) AS n FROM err_parts GROUP BY 1, 2, 3, 4, 5) e
    GROUP BY 1, 2, 3, 4
),
hist AS (
    SELECT {_KEY}, bucket, jsonb_object_agg(k, n) AS latency_histogram
    FROM (SELECT {_KEY}, bucket, k, sum(n) AS n FROM hist_parts GROUP BY 1, 2, 3, 4, 5) h
    GROUP BY 1, 2, 3, 4
)
INSERT INTO trust_rollup ({_COLUMNS})
SELECT :tenant, b.capability_id, b.capability_version, b.is_synthetic, :span, b.bucket,
       b.samples, b.successes, b.rate_limited, b.excluded,
       coalesce(e.errors, '{{}}'), coalesce(h.latency_histogram, '{{}}'),
       b.last_success_at, b.last_failure_at
FROM base b
LEFT JOIN errs e USING (capability_id, capability_version, is_synthetic, bucket)
LEFT JOIN hist h USING (capability_id, capability_version, is_synthetic, bucket)
"""

# Minutes, from the raw events (an equality join on the minute, within the touched range
# of time, so only the month partitions it spans are read).
MINUTES = text(
    f"""
WITH ev AS (
    SELECT o.capability_id, o.capability_version, o.is_synthetic, t.bucket, o.success,
           o.error_taxonomy, o.latency_ms, o."timestamp", {_EXCLUDED} AS excluded
    FROM outcome_events o
    JOIN trust_touched t
      ON {_JOIN_KEY.format(a="o", b="t")} AND date_trunc('minute', o."timestamp", 'UTC') = t.bucket
    WHERE o.tenant_id = :tenant AND o."timestamp" >= :low AND o."timestamp" < :high
),
base AS (
    SELECT {_KEY}, bucket,
           count(*) FILTER (WHERE NOT excluded) AS samples,
           count(*) FILTER (WHERE success AND NOT excluded) AS successes,
           count(*) FILTER (WHERE error_taxonomy = '{HALF_WEIGHT_TAXONOMY}') AS rate_limited,
           count(*) FILTER (WHERE excluded) AS excluded,
           max("timestamp") FILTER (WHERE success) AS last_success_at,
           max("timestamp") FILTER (WHERE NOT success AND NOT excluded) AS last_failure_at
    FROM ev GROUP BY 1, 2, 3, 4
),
err_parts AS (
    SELECT {_KEY}, bucket, error_taxonomy AS k, count(*) AS n
    FROM ev WHERE error_taxonomy <> 'none' GROUP BY 1, 2, 3, 4, 5
),
hist_parts AS (
    SELECT {_KEY}, bucket, {_BUCKET.replace("o.", "ev.")} AS k, count(*) AS n
    FROM ev WHERE NOT excluded GROUP BY 1, 2, 3, 4, 5
),
{_SUMMED}
"""
)


def _rolled_up(unit: str, source_span: int) -> str:
    """The buckets of one ``unit`` (hour, day) that hold a touched minute, summed from the
    rollup's rows of ``source_span`` minutes (an equality join on the unit, within the
    touched range of time)."""
    return f"""
WITH units AS (
    SELECT DISTINCT {_KEY}, date_trunc('{unit}', bucket, 'UTC') AS unit FROM trust_touched
),
m AS (
    SELECT r.*, u.unit FROM trust_rollup r
    JOIN units u
      ON {_JOIN_KEY.format(a="r", b="u")} AND date_trunc('{unit}', r.bucket, 'UTC') = u.unit
    WHERE r.tenant_id = :tenant AND r.span_minutes = {source_span}
      AND r.bucket >= date_trunc('{unit}', CAST(:low AS timestamptz), 'UTC')
      AND r.bucket < date_trunc('{unit}', CAST(:high AS timestamptz), 'UTC')
                     + interval '1 {unit}'
),
base AS (
    SELECT {_KEY}, unit AS bucket, sum(samples) AS samples, sum(successes) AS successes,
           sum(rate_limited) AS rate_limited, sum(excluded) AS excluded,
           max(last_success_at) AS last_success_at, max(last_failure_at) AS last_failure_at
    FROM m GROUP BY 1, 2, 3, 4
),
err_parts AS (
    SELECT {_KEY}, unit AS bucket, kv.key AS k, kv.value::int AS n
    FROM m, jsonb_each_text(m.errors) kv
),
hist_parts AS (
    SELECT {_KEY}, unit AS bucket, kv.key::int AS k, kv.value::int AS n
    FROM m, jsonb_each_text(m.latency_histogram) kv
),
{_SUMMED}
"""


# Hours from their minutes, days from their hours.
HOURS = text(_rolled_up("hour", MINUTE))
DAYS = text(_rolled_up("day", HOUR))


async def refreshed_at(session: AsyncSession, tenant_id: str) -> datetime | None:
    """Up to when the tenant's rollup has read (None: never refreshed)."""
    row = await session.execute(
        text("SELECT refreshed_at FROM trust_refresh WHERE tenant_id = :tenant"),
        {"tenant": tenant_id},
    )
    value: datetime | None = row.scalar_one_or_none()
    return value


async def refresh(session: AsyncSession, tenant_id: str) -> datetime:
    """Rebuild the tenant's minute and hour buckets that hold events recorded since its
    last refresh; returns the new mark. The caller's transaction is scoped to the tenant."""
    # Two refreshes of one tenant at once (the schedule's and one started by hand) would
    # rebuild the same buckets: the second waits for the first.
    await session.execute(
        text("SELECT pg_advisory_xact_lock(hashtext('moat.trust_refresh:' || :tenant))"),
        {"tenant": tenant_id},
    )
    now: datetime = (await session.execute(text("SELECT now()"))).scalar_one()
    last = await refreshed_at(session, tenant_id)
    since = (last - COMMIT_MARGIN) if last is not None else datetime.min.replace(tzinfo=now.tzinfo)
    await session.execute(TOUCHED, {"tenant": tenant_id, "since": since})
    # A temporary table has no statistics until analysed; without them the planner takes
    # it for a few rows and joins the events by nested loops.
    await session.execute(text("ANALYZE trust_touched"))
    low, high = (await session.execute(TOUCHED_RANGE)).one()
    if low is not None:
        # Separate statements: the parts of one statement share a snapshot, so an insert
        # beside the delete would still meet the rows it replaces.
        await session.execute(CLEAR, {"tenant": tenant_id})
        window = {"low": low, "high": high + timedelta(minutes=1)}
        await session.execute(MINUTES, {"tenant": tenant_id, "span": MINUTE, **window})
        await session.execute(HOURS, {"tenant": tenant_id, "span": HOUR, **window})
        await session.execute(DAYS, {"tenant": tenant_id, "span": DAY, **window})
    await session.execute(text("DROP TABLE trust_touched"))
    await session.execute(
        text(
            "INSERT INTO trust_refresh (tenant_id, refreshed_at) VALUES (:tenant, :now) "
            "ON CONFLICT (tenant_id) DO UPDATE SET refreshed_at = "
            "greatest(trust_refresh.refreshed_at, excluded.refreshed_at)"
        ),
        {"tenant": tenant_id, "now": now},
    )
    return now


_ROLLUP_FILTER = (
    "tenant_id = :tenant AND span_minutes = :span AND bucket >= :since AND bucket < :until "
    "AND (CAST(:capability AS text) IS NULL OR capability_id = :capability)"
)


async def rollup_counts(
    session: AsyncSession,
    tenant_id: str,
    since: datetime,
    until: datetime,
    capability_id: str | None = None,
    span_minutes: int = 1,
) -> list[TrustCounts]:
    """A window's counts from the rollup's minutes (``span_minutes`` 1), hours (60) or
    days (1440): at
    most one row per bucket of the window per capability version and kind of traffic is
    read, whatever the traffic."""
    args = {
        "tenant": tenant_id,
        "since": since,
        "until": until,
        "capability": capability_id,
        "span": span_minutes,
    }
    base = await session.execute(
        text(
            f"SELECT {_KEY}, sum(samples), sum(successes), sum(rate_limited), sum(excluded), "
            f"max(last_success_at), max(last_failure_at) FROM trust_rollup "
            f"WHERE {_ROLLUP_FILTER} GROUP BY 1, 2, 3"
        ),
        args,
    )
    counts = {(r[0], r[1], r[2]): _counts_of(r) for r in base.all()}
    rows = await session.execute(
        text(
            f"SELECT {_KEY}, 'e', kv.key, sum(kv.value::int) FROM trust_rollup, "
            f"jsonb_each_text(errors) kv WHERE {_ROLLUP_FILTER} GROUP BY 1, 2, 3, 4, 5 "
            f"UNION ALL SELECT {_KEY}, 'h', kv.key, sum(kv.value::int) FROM trust_rollup, "
            f"jsonb_each_text(latency_histogram) kv WHERE {_ROLLUP_FILTER} GROUP BY 1, 2, 3, 4, 5"
        ),
        args,
    )
    for cap, ver, syn, kind, key, total in rows.all():
        entry = counts[(cap, ver, syn)]
        if kind == "e":
            entry.errors[key] = int(total)
        else:
            entry.latency_histogram[int(key)] = int(total)
    return list(counts.values())


async def rollup_series(
    session: AsyncSession,
    tenant_id: str,
    since: datetime,
    until: datetime,
    slices: int,
    span_minutes: int = 1,
    capability_id: str | None = None,
) -> list[TrustSlice]:
    """A window cut into ``slices`` equal parts, each part's counts per capability version
    and kind of traffic (parts with no counted outcome are absent): one statement over the
    same rollup rows as ``rollup_counts``."""
    seconds = (until - since).total_seconds() / slices
    args = {
        "tenant": tenant_id,
        "since": since,
        "until": until,
        "capability": capability_id,
        "span": span_minutes,
        "slice": seconds,
    }
    rows = await session.execute(
        text(
            f"SELECT {_KEY}, floor(extract(epoch FROM bucket - :since) / :slice)::int, "
            "sum(samples), sum(successes), sum(rate_limited) FROM trust_rollup "
            f"WHERE {_ROLLUP_FILTER} GROUP BY 1, 2, 3, 4 HAVING sum(samples) > 0 ORDER BY 4"
        ),
        args,
    )
    return [
        TrustSlice(
            capability_id=r[0],
            capability_version=r[1],
            is_synthetic=r[2],
            index=min(int(r[3]), slices - 1),
            samples=int(r[4]),
            successes=int(r[5]),
            rate_limited=int(r[6]),
        )
        for r in rows.all()
    ]


def _counts_of(r: Any, **extra: Any) -> TrustCounts:
    """Counts from a row whose first nine columns are, in order: capability id, version,
    synthetic or not, samples, successes, rate-limited, excluded, last success, last failure
    (the shape both the rollup and the raw query answer)."""
    return TrustCounts(
        capability_id=r[0],
        capability_version=r[1],
        is_synthetic=r[2],
        samples=r[3],
        successes=r[4],
        rate_limited=r[5],
        excluded=r[6],
        last_success_at=r[7],
        last_failure_at=r[8],
        **extra,
    )


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
        counts[(r[0], r[1], r[2])] = _counts_of(
            r, exact_percentiles={k: float(v) for k, v in exact.items()}
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


async def windows_counts(
    session: AsyncSession,
    tenant_id: str,
    windows: list[tuple[datetime, datetime]],
    capability_id: str | None = None,
    span_minutes: int = 1,
) -> tuple[list[list[TrustCounts]], datetime] | None:
    """One tenant's rollup counts for each window, with its refresh mark; None when its
    rollup was never refreshed. The session's transaction must be scoped to the tenant."""
    mark = await refreshed_at(session, tenant_id)
    if mark is None:
        return None
    counts = [
        await rollup_counts(session, tenant_id, since, until, capability_id, span_minutes)
        for since, until in windows
    ]
    return counts, mark


def platform_counts(
    per_tenant: list[tuple[list[list[TrustCounts]], datetime] | None], windows: int
) -> tuple[list[list[TrustCounts]], datetime | None]:
    """Every tenant's counts (``windows_counts`` of each) for each of ``windows`` windows
    together, and the oldest refresh mark among them."""
    per_window: list[list[TrustCounts]] = [[] for _ in range(windows)]
    oldest: datetime | None = None
    for found in per_tenant:
        if found is None:
            continue
        counts, mark = found
        oldest = mark if oldest is None else min(oldest, mark)
        for i, window in enumerate(counts):
            per_window[i] += window
    return per_window, oldest
