"""A provider's ``Retry-After`` holds back the tenant's other calls on that connection, on
every worker (the hold is in Postgres), and never another tenant's calls to the same
provider through its own connection."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.exceptions import ApplicationError

from activities.adapters import fail
from activities.provider_buckets import ProviderBuckets
from schemas.capabilities import CapabilityCatalog
from schemas.connections import Credential
from schemas.records import ErrorTaxonomy
from schemas.run import AdapterInput, AdapterOutput
from tests.support.fakes import FakeProvider, Step
from tests.support.stack import Stack

RETRY_AFTER = 2


async def _until(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):
        for _ in iter(check, True):  # polled: the fake provider signals nothing
            await asyncio.sleep(0.02)


async def test_a_retry_after_holds_the_tenants_connection_and_no_one_elses(
    stack: Stack, provider: FakeProvider
) -> None:
    config = {"base_url": provider.base_url}
    a_connection = await stack.add_connection("http_bearer", "tok-a-" + "x" * 24, config=config)
    b_tenant, b_key = await stack.new_tenant()
    b_connection = await stack.add_connection(
        "http_bearer", "tok-b-" + "y" * 24, config=config, tenant_id=b_tenant
    )
    limited = provider.script(
        "/limited",
        Step(429, {"error": "slow down"}, headers={"Retry-After": str(RETRY_AFTER)}),
        Step(200),
    )
    first = asyncio.create_task(
        stack.execute(
            "http.request", {"method": "POST", "url": limited}, connection_id=a_connection
        )
    )
    await _until(lambda: 429 in provider.statuses("/limited"))
    refused_at = provider.calls_to("/limited")[0].at
    await asyncio.sleep(0.3)  # the worker has read the answer and written the hold

    loop = asyncio.get_running_loop()
    a_next = asyncio.create_task(
        stack.execute(
            "http.request",
            {"method": "POST", "url": provider.script("/a-next")},
            connection_id=a_connection,
        )
    )
    b_sent = loop.time()
    b_answer = await stack.execute(
        "http.request",
        {"method": "POST", "url": provider.script("/b")},
        connection_id=b_connection,
        api_key=b_key,
    )
    assert b_answer.status_code == 200, b_answer.text
    # B's call, same provider, its own connection: not held back.
    assert provider.calls_to("/b")[0].at - b_sent < 1.0

    assert (await a_next).status_code == 200
    assert (await first).status_code == 200
    # A's next call waited out the provider's Retry-After before reaching it.
    assert provider.calls_to("/a-next")[0].at - refused_at >= RETRY_AFTER - 0.05
    # And the held call reached the provider once, not once per try.
    assert len(provider.calls_to("/a-next")) == 1


async def test_a_hold_longer_than_an_attempt_can_wait_fails_without_calling(
    stack: Stack, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    """Past what an attempt can wait, the call is not made: a retryable
    ``provider_rate_limited`` whose next retry is when the hold ends. Another tenant's
    connection is called at once."""
    calls: list[str] = []

    async def adapter(inp: AdapterInput, credential: Credential | None) -> AdapterOutput:
        calls.append(inp.ref.tenant_id)
        if len(calls) == 1:
            raise fail(
                ErrorTaxonomy.PROVIDER_RATE_LIMITED,
                "provider answered HTTP 429",
                http_status=429,
                retry_after=timedelta(seconds=30),
            )
        return AdapterOutput(http_status=200, output={}, output_hash="sha256:" + "0" * 64)

    guarded = ProviderBuckets(app_sessions).guard(adapter)
    other_tenant, _ = await stack.new_tenant()

    def call(tenant_id: str, connection_id: str) -> AdapterInput:
        spec = CapabilityCatalog().get("http.request")
        assert spec is not None
        return AdapterInput(
            tenant_id=tenant_id,
            capability=spec,
            input={},
            connection_id=connection_id,
            idempotency_key="k",
            trace_id="0" * 32,
        )

    with pytest.raises(ApplicationError):
        await guarded(call(stack.tenant_id, "con_a"), None)  # the provider's 429
    with pytest.raises(ApplicationError) as held:
        await guarded(call(stack.tenant_id, "con_a"), None)
    assert held.value.type == "provider_rate_limited" and not held.value.non_retryable
    assert held.value.next_retry_delay is not None
    assert 25 < held.value.next_retry_delay.total_seconds() <= 30
    assert calls == [stack.tenant_id]  # not called while held
    await guarded(call(other_tenant, "con_a"), None)  # same id, another tenant: not held
    await guarded(call(stack.tenant_id, "con_other"), None)  # another connection: not held
    assert calls == [stack.tenant_id, other_tenant, stack.tenant_id]
