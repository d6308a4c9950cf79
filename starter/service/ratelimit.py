"""Each tenant's rate of execute requests on this gateway: a token bucket per tenant.

A tenant may send ``MOAT_RATE_LIMIT_PER_SECOND`` requests per second (``MOAT_RATE_LIMITS``
overrides it per tenant), in bursts of up to ``MOAT_RATE_LIMIT_BURST_SECONDS`` of that rate;
past it the request is refused, ``429 rate_limited``, with ``Retry-After``: when the next
token arrives. Refused requests take no token, so a caller that waits as told gets in.

Per gateway, in memory, on purpose: the execute path takes no extra round trip for it (a
bucket in Postgres would be a write per request on one row per tenant, serialising each
tenant's requests on its lock). With N gateways behind a balancer a tenant may reach N times
the rate; set it to the share of one gateway. Answers from the gateway's memory (a repeat of
a finished key) are not counted: they cost about a millisecond of gateway CPU and reach
neither Postgres nor Temporal, which is what the limit protects.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from schemas.errors import ErrorCode
from schemas.settings import MoatSettings
from starter.service.errors import MoatError

# Tenants with a bucket held; past it the least recently seen is dropped (it then starts
# full again, which only ever admits more).
MAX_TENANTS = 100_000


class RateLimits:
    """Token buckets by tenant: (tokens, monotonic time they were counted)."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, max_tenants: int = MAX_TENANTS
    ) -> None:
        self._clock = clock
        self._max_tenants = max_tenants
        self._buckets: dict[str, tuple[float, float]] = {}

    def admit(self, settings: MoatSettings, tenant_id: str) -> None:
        """Take one of the tenant's tokens, or refuse with ``rate_limited``."""
        rate = settings.rate_limit_of(tenant_id)
        if rate <= 0:
            return
        depth = max(1.0, rate * settings.rate_limit_burst_seconds)
        now = self._clock()
        held = self._buckets.pop(tenant_id, None)
        tokens = depth if held is None else min(depth, held[0] + (now - held[1]) * rate)
        if tokens >= 1:
            self._keep(tenant_id, tokens - 1, now)
            return
        self._keep(tenant_id, tokens, now)
        retry_after = max(1, math.ceil((1 - tokens) / rate))
        raise MoatError(
            ErrorCode.RATE_LIMITED,
            f"This tenant sends more than {rate:g} execute requests per second; retry after "
            f"{retry_after} s (Retry-After), with the same Idempotency-Key.",
            {"retry_after_seconds": retry_after, "limit_per_second": rate},
        )

    def _keep(self, tenant_id: str, tokens: float, at: float) -> None:
        if len(self._buckets) >= self._max_tenants:
            del self._buckets[next(iter(self._buckets))]
        self._buckets[tenant_id] = (tokens, at)  # last in order: most recently seen
