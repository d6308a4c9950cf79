"""What the tenant-admin pages' tests start from: a delivery dead letter (its outbox item
out of attempts, as the relay leaves it) and trust rollup rows, written as the worker
writes them."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from store import tenancy
from store.models import DeadLetterRow, OutboxRow, TrustRollupRow
from tests.support.stack import Stack


async def delivery_dead_letter(stack: Stack, subscription_id: str) -> str:
    """A dead letter of a delivery to ``subscription_id`` that ran out of attempts; its id."""
    letter_id = str(uuid.uuid4())
    async with stack.sessions.begin() as s:
        await tenancy.set_tenant(s, stack.tenant_id)
        outbox = OutboxRow(
            id=f"obx_{uuid.uuid4().hex}",
            tenant_id=stack.tenant_id,
            subscription_id=subscription_id,
            event_id=f"evt_{uuid.uuid4().hex}",
            event_type="execution.failed",
            aggregate_id="agg",
            payload={},
            occurred_at=datetime.now(UTC),
            status="dead_letter",
            attempts=3,
        )
        s.add(outbox)
        await s.flush()
        s.add(
            DeadLetterRow(
                id=letter_id,
                tenant_id=stack.tenant_id,
                kind="delivery",
                subject_id=outbox.id,
                reason="500 from the endpoint, 3 attempts",
                error_code="retries_exhausted",
            )
        )
    return letter_id


async def trust_minutes(stack: Stack, capability_id: str, rates: list[float]) -> None:
    """One rollup minute per rate, the newest last, 20 real outcomes each."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    async with stack.sessions.begin() as s:
        await tenancy.set_tenant(s, stack.tenant_id)
        for n, rate in enumerate(rates):
            s.add(
                TrustRollupRow(
                    tenant_id=stack.tenant_id,
                    capability_id=capability_id,
                    capability_version="1",
                    is_synthetic=False,
                    span_minutes=1,
                    bucket=now - timedelta(minutes=90 * (len(rates) - 1 - n)),
                    samples=20,
                    successes=round(20 * rate),
                    rate_limited=0,
                    excluded=1,
                    errors={"provider_error": 20 - round(20 * rate)} if rate < 1 else {},
                    latency_histogram={"60": 20},
                )
            )
