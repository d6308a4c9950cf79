"""A provider's ``Retry-After`` holds back the tenant's other calls on that connection, on
every worker (the hold is in Postgres), and never another tenant's calls to the same
provider through its own connection."""

from __future__ import annotations

import asyncio

from tests.support.fakes import FakeProvider, Step
from tests.support.stack import Stack

RETRY_AFTER = 2


async def _until(check: object, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():  # type: ignore[operator]
        assert loop.time() < deadline, "timed out"
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
        stack.execute("http.request", {"method": "POST", "url": limited}, connection_id=a_connection)
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
