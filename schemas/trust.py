"""The trust plane's contracts: how reliable a capability is, from its outcome events.

The rule (outcome-events design): a success counts 1, ``provider_rate_limited`` counts 0.5
(the provider works, it only asked us to slow down), ``gateway_error`` and
``policy_denied`` are left out of numerator and denominator (Moat's fault, or a call that
never reached the provider), every other outcome counts 0. Real and synthetic traffic are
scored apart and never mixed.

Latency percentiles read from the rollup come from a log-scale histogram (buckets 5 %
wide, exact below 20 ms): merging minute buckets and tenants needs a mergeable summary,
and the raw events' ``percentile_cont`` is what it is checked against.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, Field

from schemas.records import ErrorTaxonomy

EXCLUDED_TAXONOMIES = (ErrorTaxonomy.GATEWAY_ERROR.value, ErrorTaxonomy.POLICY_DENIED.value)
HALF_WEIGHT_TAXONOMY = ErrorTaxonomy.PROVIDER_RATE_LIMITED.value
# Each histogram bucket is this much wider than the one before it.
LATENCY_BUCKET_RATIO = 1.05
DEFAULT_MIN_SAMPLES = 20
TOO_FEW_SAMPLES = "too_few_samples"


class TrustWindow(StrEnum):
    H1 = "1h"
    H24 = "24h"
    D7 = "7d"
    D30 = "30d"

    @property
    def length(self) -> timedelta:
        return WINDOW_LENGTHS[self]

    @property
    def span_minutes(self) -> int:
        """The rollup buckets the window is read from: minutes up to a day, hours for a
        week, days for a month (so each reads at most 1,440 buckets)."""
        return SPANS[self]

    def bounds(self, as_of: datetime) -> tuple[datetime, datetime]:
        return window_bounds(self.length, as_of, self.span_minutes)


SPANS = {TrustWindow.H1: 1, TrustWindow.H24: 1, TrustWindow.D7: 60, TrustWindow.D30: 1440}
WINDOW_LENGTHS = {
    TrustWindow.H1: timedelta(hours=1),
    TrustWindow.H24: timedelta(hours=24),
    TrustWindow.D7: timedelta(days=7),
    TrustWindow.D30: timedelta(days=30),
}


def window_bounds(
    window: timedelta, as_of: datetime, span_minutes: int = 1
) -> tuple[datetime, datetime]:
    """Whole buckets (minutes, hours or UTC days), the current one included: the rollup's
    buckets and the raw events' time range then cover exactly the same events."""
    start_of = as_of.astimezone(UTC)
    if span_minutes == 1440:
        until = start_of.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    elif span_minutes == 60:
        until = start_of.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    else:
        until = start_of.replace(second=0, microsecond=0) + timedelta(minutes=1)
    return until - window, until


def latency_bucket(latency_ms: int) -> int:
    """The histogram bucket of a latency (the same formula as the rollup's SQL)."""
    if latency_ms < 1:
        return 0
    return 1 + math.floor(math.log(latency_ms) / math.log(LATENCY_BUCKET_RATIO))


def _bucket_range(bucket: int) -> tuple[int, int]:
    """The whole milliseconds bucket ``bucket`` can hold."""
    if bucket <= 0:
        return 0, 0
    low = math.ceil(LATENCY_BUCKET_RATIO ** (bucket - 1))
    high = max(low, math.ceil(LATENCY_BUCKET_RATIO**bucket) - 1)
    return low, high


def percentile(histogram: Mapping[int, int], fraction: float) -> float | None:
    """``percentile_cont`` read from a histogram: the values at the two positions around
    (n - 1)·fraction of the sorted sample, each placed linearly inside its bucket's range,
    interpolated like ``percentile_cont`` does."""
    n = sum(histogram.values())
    if n == 0:
        return None
    position = (n - 1) * fraction
    below = math.floor(position)
    low = _value_at(histogram, below)
    if position == below:
        return low
    return low + (position - below) * (_value_at(histogram, below + 1) - low)


def _value_at(histogram: Mapping[int, int], index: int) -> float:
    """The index-th smallest value (0-based), as well as the histogram can tell."""
    seen = 0
    for bucket in sorted(histogram):
        count = histogram[bucket]
        if index < seen + count:
            low, high = _bucket_range(bucket)
            if high == low:
                return float(low)
            if count == 1:
                return (low + high) / 2
            return low + (high - low) * (index - seen) / (count - 1)
        seen += count
    return float(_bucket_range(max(histogram))[1])


class TrustCounts(BaseModel):
    """What the rollup (or the raw events) hold for one capability version and one kind of
    traffic over a time range."""

    capability_id: str
    capability_version: str
    is_synthetic: bool
    samples: int = Field(description="Outcomes counted: all but gateway errors and denials.")
    successes: int
    rate_limited: int
    excluded: int
    errors: dict[str, int] = Field(default_factory=dict)
    latency_histogram: dict[int, int] = Field(default_factory=dict)
    # Exact percentiles (raw events' percentile_cont); None: read them from the histogram.
    exact_percentiles: dict[str, float] | None = None
    last_success_at: datetime | None = None
    last_failure_at: datetime | None = None

    def merged(self, other: TrustCounts) -> TrustCounts:
        """Two tenants' counts of the same capability version and traffic, together."""
        hist = dict(self.latency_histogram)
        for bucket, count in other.latency_histogram.items():
            hist[bucket] = hist.get(bucket, 0) + count
        errors = dict(self.errors)
        for code, count in other.errors.items():
            errors[code] = errors.get(code, 0) + count
        return self.model_copy(
            update={
                "samples": self.samples + other.samples,
                "successes": self.successes + other.successes,
                "rate_limited": self.rate_limited + other.rate_limited,
                "excluded": self.excluded + other.excluded,
                "errors": errors,
                "latency_histogram": hist,
                "exact_percentiles": None,
                "last_success_at": _latest(self.last_success_at, other.last_success_at),
                "last_failure_at": _latest(self.last_failure_at, other.last_failure_at),
            }
        )

    @property
    def success_rate(self) -> float | None:
        if self.samples == 0:
            return None
        return (self.successes + 0.5 * self.rate_limited) / self.samples

    def latency(self, fraction: float) -> float | None:
        if self.exact_percentiles is not None:
            return self.exact_percentiles.get(_percentile_name(fraction))
        return percentile(self.latency_histogram, fraction)


class TrustSlice(BaseModel):
    """One part of a window cut into equal parts (``index`` 0 is the oldest): the counted
    outcomes of one capability version and kind of traffic in it, for a trend line."""

    capability_id: str
    capability_version: str
    is_synthetic: bool
    index: int
    samples: int
    successes: int
    rate_limited: int

    @property
    def success_rate(self) -> float:
        return (self.successes + 0.5 * self.rate_limited) / self.samples


def _latest(a: datetime | None, b: datetime | None) -> datetime | None:
    return max((t for t in (a, b) if t is not None), default=None)


def _percentile_name(fraction: float) -> str:
    return f"p{round(fraction * 100)}"


class LatencyPercentiles(BaseModel):
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None


class Trend(BaseModel):
    """This window's success rate against the window before it."""

    previous_success_rate: float | None = None
    previous_samples: int = 0
    delta: float | None = Field(default=None, description="Now minus before; null if either is.")


class TrustScore(BaseModel):
    """One kind of traffic (real or synthetic) of one capability version, over a window."""

    success_rate: float | None = Field(
        description="Successes + 0.5 x rate-limited, over the counted samples; null with a "
        "`reason` when there are fewer than the minimum."
    )
    samples: int
    reason: str | None = None
    excluded: int = Field(description="Gateway errors and policy denials, not counted.")
    latency_ms: LatencyPercentiles
    error_mix: dict[str, int] = Field(description="Outcomes by error taxonomy (not `none`).")
    top_error: str | None = None
    last_success_at: datetime | None = None
    last_failure_at: datetime | None = None
    trend: Trend


class CapabilityTrust(BaseModel):
    capability_id: str
    capability_version: str
    real: TrustScore
    synthetic: TrustScore


class TrustReport(BaseModel):
    """Scores of every capability version with traffic in the window (or the one asked)."""

    window: TrustWindow
    since: datetime
    until: datetime
    min_samples: int
    refreshed_at: datetime | None = Field(
        default=None,
        description="How far the rollup has read (the oldest of the tenants asked): "
        "outcomes recorded after it are not in the scores yet.",
    )
    scores: list[CapabilityTrust]


def score(counts: TrustCounts | None, previous: TrustCounts | None, min_samples: int) -> TrustScore:
    """The score of one kind of traffic, null below ``min_samples`` (never a 100 % of three
    calls)."""
    samples = counts.samples if counts is not None else 0
    enough = counts is not None and samples >= min_samples
    before = previous.success_rate if previous is not None else None
    if previous is not None and previous.samples < min_samples:
        before = None
    rate = counts.success_rate if enough and counts is not None else None
    errors = dict(counts.errors) if counts is not None else {}
    latencies = LatencyPercentiles()
    if enough and counts is not None:
        latencies = LatencyPercentiles(
            p50=counts.latency(0.5), p95=counts.latency(0.95), p99=counts.latency(0.99)
        )
    return TrustScore(
        success_rate=rate,
        samples=samples,
        reason=None
        if enough
        else f"{TOO_FEW_SAMPLES}: {samples} counted outcomes, at least {min_samples} needed",
        excluded=counts.excluded if counts is not None else 0,
        latency_ms=latencies,
        error_mix=errors,
        top_error=max(errors, key=lambda code: (errors[code], code)) if errors else None,
        last_success_at=counts.last_success_at if counts is not None else None,
        last_failure_at=counts.last_failure_at if counts is not None else None,
        trend=Trend(
            previous_success_rate=before,
            previous_samples=previous.samples if previous is not None else 0,
            delta=rate - before if rate is not None and before is not None else None,
        ),
    )


def report(
    window: TrustWindow,
    bounds: tuple[datetime, datetime],
    current: list[TrustCounts],
    previous: list[TrustCounts],
    min_samples: int,
    refreshed_at: datetime | None = None,
) -> TrustReport:
    """Pair each capability version's real and synthetic counts, with the previous window's."""

    def by_key(rows: list[TrustCounts]) -> dict[tuple[str, str, bool], TrustCounts]:
        merged: dict[tuple[str, str, bool], TrustCounts] = {}
        for row in rows:
            key = (row.capability_id, row.capability_version, row.is_synthetic)
            merged[key] = merged[key].merged(row) if key in merged else row
        return merged

    now, before = by_key(current), by_key(previous)
    versions = sorted({(cap, ver) for cap, ver, _ in now})
    scores = [
        CapabilityTrust(
            capability_id=cap,
            capability_version=ver,
            real=score(now.get((cap, ver, False)), before.get((cap, ver, False)), min_samples),
            synthetic=score(now.get((cap, ver, True)), before.get((cap, ver, True)), min_samples),
        )
        for cap, ver in versions
    ]
    return TrustReport(
        window=window,
        since=bounds[0],
        until=bounds[1],
        min_samples=min_samples,
        refreshed_at=refreshed_at,
        scores=scores,
    )
