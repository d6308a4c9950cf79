"""Trust scores from a fixed set of outcome events: the success-rate rule, real and
synthetic apart, the rollup against the raw events, too few samples."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from schemas.trust import TrustCounts, TrustWindow
from starter.service import trust as trust_service
from store import tenancy, tenants, trust
from store.models import OutcomeEventRow

AS_OF = datetime.now(UTC).replace(second=30, microsecond=0) - timedelta(minutes=5)
CAP = "trust.test"
# (taxonomy, how many, synthetic): success counts 1, rate-limited 0.5, gateway errors and
# denials are left out, every other failure counts 0.
REAL = [
    ("none", 16),
    ("provider_rate_limited", 4),
    ("provider_server_error", 3),
    ("timeout", 2),
    ("gateway_error", 3),
    ("policy_denied", 2),
]
# By hand: 25 counted (16 + 4 + 3 + 2); (16 + 4 x 0.5) / 25 = 0.72.
REAL_RATE = 0.72
LATENCIES = [3, 7, 12, 18, 40, 95, 150, 320, 800, 1500, 2400, 61, 77, 5, 230]


def event(tenant_id: str, cap: str, taxonomy: str, at: datetime, latency: int, synthetic: bool):
    return OutcomeEventRow(
        id=str(uuid.uuid4()),
        timestamp=at,
        receipt_id=str(uuid.uuid4()),
        tenant_id=tenant_id,
        capability_id=cap,
        capability_version="1.0.0",
        adapter_id="test",
        success=taxonomy == "none",
        latency_ms=latency,
        error_taxonomy=taxonomy,
        is_synthetic=synthetic,
    )


def events(
    tenant_id: str, cap: str, mix: list[tuple[str, int]], at: datetime, synthetic: bool = False
) -> list[OutcomeEventRow]:
    rows = []
    for taxonomy, count in mix:
        for _ in range(count):
            i = len(rows)
            when = at - timedelta(minutes=i % 50, seconds=i % 7)
            rows.append(
                event(tenant_id, cap, taxonomy, when, LATENCIES[i % len(LATENCIES)], synthetic)
            )
    return rows


@pytest.fixture
async def tenant(sessions: async_sessionmaker[AsyncSession]) -> str:
    async with sessions.begin() as session:
        row = await tenants.create_tenant(session, f"trust-{uuid.uuid4().hex[:10]}")
        t = row.id
        session.add_all(events(t, CAP, REAL, AS_OF))
        # Synthetic traffic that fails every time: it must not move the real score.
        session.add_all(events(t, CAP, [("provider_server_error", 21)], AS_OF, synthetic=True))
        # A window earlier, all successes: the trend.
        session.add_all(events(t, CAP, [("none", 20)], AS_OF - timedelta(minutes=70)))
        session.add_all(events(t, "trust.sparse", [("none", 3)], AS_OF))
    return t


async def refresh(app_sessions: async_sessionmaker[AsyncSession], tenant_id: str) -> None:
    async with tenancy.tenant_transaction(app_sessions, tenant_id) as session:
        await trust.refresh(session, tenant_id)


async def scores(app_sessions: async_sessionmaker[AsyncSession], tenant_id: str):
    async with tenancy.tenant_transaction(app_sessions, tenant_id) as session:
        return await trust_service.tenant_report(session, tenant_id, TrustWindow.H1, AS_OF, 20)


async def test_success_rate_matches_the_hand_computation(
    app_sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    await refresh(app_sessions, tenant)
    report = await scores(app_sessions, tenant)
    by_cap = {s.capability_id: s for s in report.scores}
    real = by_cap[CAP].real
    assert real.samples == 25 and real.excluded == 5
    assert real.success_rate == pytest.approx(REAL_RATE)
    assert real.error_mix == {
        "provider_rate_limited": 4,
        "provider_server_error": 3,
        "timeout": 2,
        "gateway_error": 3,
        "policy_denied": 2,
    }
    assert real.top_error == "provider_rate_limited"
    assert real.trend.previous_success_rate == pytest.approx(1.0)
    assert real.trend.delta == pytest.approx(REAL_RATE - 1.0)
    assert real.last_success_at is not None and real.last_failure_at is not None
    # Synthetic and real apart: all 21 probes failed, the real score did not move.
    synthetic = by_cap[CAP].synthetic
    assert synthetic.samples == 21 and synthetic.success_rate == 0.0
    assert synthetic.error_mix == {"provider_server_error": 21}


async def test_too_few_samples_is_null_with_the_reason(
    app_sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    await refresh(app_sessions, tenant)
    sparse = {s.capability_id: s for s in (await scores(app_sessions, tenant)).scores}
    score = sparse["trust.sparse"].real
    assert score.samples == 3
    assert score.success_rate is None and score.latency_ms.p50 is None
    assert score.reason is not None and score.reason.startswith("too_few_samples")
    assert sparse["trust.sparse"].synthetic.samples == 0
    assert sparse["trust.sparse"].synthetic.success_rate is None


def same(rollup: TrustCounts, raw: TrustCounts) -> None:
    fields = ("samples", "successes", "rate_limited", "excluded", "errors")
    assert rollup.model_dump(include=set(fields)) == raw.model_dump(include=set(fields))
    assert rollup.last_success_at == raw.last_success_at
    assert rollup.last_failure_at == raw.last_failure_at
    for fraction in (0.5, 0.95, 0.99):
        exact, approx = raw.latency(fraction), rollup.latency(fraction)
        assert exact is not None and approx is not None
        # Histogram buckets are 5 % wide: the rollup's percentile is within one bucket.
        assert abs(approx - exact) <= 0.05 * exact + 1, (fraction, approx, exact)


async def test_the_rollup_equals_the_raw_computation(
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    await refresh(app_sessions, tenant)
    # Recorded after the refresh, but initiated within the window (a long run): the next
    # refresh finds it by its recording time; a refresh repeated changes nothing.
    async with sessions.begin() as session:
        session.add_all(
            events(tenant, CAP, [("none", 7), ("timeout", 1)], AS_OF - timedelta(minutes=30))
        )
    await refresh(app_sessions, tenant)
    await refresh(app_sessions, tenant)
    # Minutes (1 h) and hours (30 d, summed from the minutes) alike.
    for window, real in ((TrustWindow.H1, 33), (TrustWindow.D30, 53)):
        bounds = window.bounds(AS_OF)
        async with tenancy.tenant_transaction(app_sessions, tenant) as session:
            rolled = await trust.rollup_counts(session, tenant, *bounds, None, window.span_minutes)
            raw = await trust.raw_counts(session, tenant, *bounds)
        key = lambda c: (c.capability_id, c.is_synthetic)  # noqa: E731
        assert sorted(map(key, rolled)) == sorted(map(key, raw))
        raw_by = {key(c): c for c in raw}
        for counts in rolled:
            if counts.samples:
                same(counts, raw_by[key(counts)])
        assert raw_by[(CAP, False)].samples == real


async def test_another_tenant_sees_none_of_it(
    app_sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    await refresh(app_sessions, tenant)
    async with sessions.begin() as session:
        other = (await tenants.create_tenant(session, f"trust-{uuid.uuid4().hex[:10]}")).id
    await refresh(app_sessions, other)
    assert (await scores(app_sessions, other)).scores == []
