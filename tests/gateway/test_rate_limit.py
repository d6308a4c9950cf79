"""A tenant's execute requests per second, per gateway: a token bucket per tenant. Past
it, ``429 rate_limited`` with ``Retry-After`` (header and details); another tenant is not
touched, and a per-tenant override (``MOAT_RATE_LIMITS``) lifts or lowers one tenant's."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from schemas.settings import MoatSettings
from starter.service import MoatError
from starter.service.ratelimit import RateLimits
from tests.support.stack import StackFactory


async def test_a_burst_over_the_rate_is_refused_and_another_tenant_is_not(
    make_stack: StackFactory,
) -> None:
    async with make_stack(rate_limit_per_second=1.0, rate_limit_burst_seconds=3.0) as stack:
        burst = await asyncio.gather(
            *(
                stack.execute("demo.echo", {"message": str(i)}, key=f"burst-{uuid.uuid4().hex}")
                for i in range(8)
            )
        )
        statuses = sorted(r.status_code for r in burst)
        assert statuses.count(200) == 3, statuses  # the bucket's depth: 3 s of 1/s
        refused = [r for r in burst if r.status_code == 429]
        assert len(refused) == 5
        for answer in refused:
            error = answer.json()["error"]
            assert error["code"] == "rate_limited"
            assert int(answer.headers["Retry-After"]) >= 1
            assert error["details"]["retry_after_seconds"] == int(answer.headers["Retry-After"])
        # Tenant B, on the same gateway at the same moment, has its own bucket.
        _, other_key = await stack.new_tenant()
        others = await asyncio.gather(
            *(stack.execute("demo.echo", {"message": str(i)}, api_key=other_key) for i in range(3))
        )
        assert [r.status_code for r in others] == [200, 200, 200], [r.text for r in others]


def test_the_bucket_refills_at_the_rate_and_overrides_apply_per_tenant() -> None:
    now = [0.0]
    limits = RateLimits(clock=lambda: now[0])
    settings = MoatSettings(
        rate_limit_per_second=2.0, rate_limit_burst_seconds=1.0, rate_limits={"vip": 0, "slow": 0.5}
    )
    limits.admit(settings, "a")
    limits.admit(settings, "a")
    with pytest.raises(MoatError) as refused:
        limits.admit(settings, "a")
    assert refused.value.code == "rate_limited"
    assert refused.value.details["retry_after_seconds"] == 1
    now[0] = 0.5  # one token back at 2/s
    limits.admit(settings, "a")
    for _ in range(1000):  # 0: no limit for that tenant
        limits.admit(settings, "vip")
    limits.admit(settings, "slow")  # depth 1 (never less than one request)
    with pytest.raises(MoatError) as slow:
        limits.admit(settings, "slow")
    assert slow.value.details["retry_after_seconds"] == 2
