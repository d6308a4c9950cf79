"""The client through a gateway that drops connections, loses answers and is busy: every
retry carries the same idempotency key, so a request that reached Moat is answered from
its receipt, never run twice; and an accepted run is polled at its Location."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from moat_client import AsyncMoatClient, GatewayUnavailable, MoatClient, RetryPolicy

from tests.client.proxy import flaky_proxy
from tests.support.stack import Stack

QUICK = RetryPolicy(base_delay=0.01, max_delay=0.05, deadline=60.0)


async def receipts_for(stack: Stack, key: str) -> int:
    async with AsyncMoatClient(stack.url, stack.api_key) as moat:
        return len((await moat.list_receipts(idempotency_key=key)).items)


async def test_drops_lost_answers_and_busy_answers_are_retried_with_the_same_key(
    stack: Stack,
) -> None:
    async with flaky_proxy(stack.url) as proxy:
        proxy.plan = ["drop", "503", "lose_answer"]
        async with AsyncMoatClient(proxy.url, stack.api_key, retry=QUICK) as moat:
            result = await moat.execute("demo.echo", {"n": 1}, idempotency_key="flaky-1")
    assert result.ok and result.output == {"n": 1}
    # The lost answer's request ran; the retry after it read its receipt.
    assert result.replayed
    assert [s.action for s in proxy.posts()] == ["drop", "503", "lose_answer", "pass"]
    assert {s.headers["idempotency-key"] for s in proxy.posts()} == {"flaky-1"}
    assert await receipts_for(stack, "flaky-1") == 1


async def test_without_a_key_the_retry_is_the_same_request(stack: Stack) -> None:
    """The gateway derives the key from the payload; the retry resends it byte for byte."""
    async with flaky_proxy(stack.url) as proxy:
        proxy.plan = ["lose_answer"]
        async with AsyncMoatClient(proxy.url, stack.api_key, retry=QUICK) as moat:
            result = await moat.execute("demo.echo", {"unkeyed": True})
    assert result.replayed and result.envelope.idempotency_key is not None
    assert await receipts_for(stack, result.envelope.idempotency_key) == 1


async def test_the_client_gives_up_with_the_key_to_send_again(stack: Stack) -> None:
    async with flaky_proxy(stack.url) as proxy:
        proxy.default = "drop"
        retry = RetryPolicy(base_delay=0.01, max_delay=0.05, max_attempts=3)
        async with AsyncMoatClient(proxy.url, stack.api_key, retry=retry) as moat:
            with pytest.raises(GatewayUnavailable) as gave_up:
                await moat.execute("demo.echo", {"n": 2}, idempotency_key="gone-1")
    assert gave_up.value.code == "gateway_unavailable"
    assert gave_up.value.idempotency_key == "gone-1" and "same idempotency key" in str(
        gave_up.value
    )
    assert len(proxy.posts()) == 3


async def test_accepted_is_polled_at_its_location_on_an_injected_client(stack: Stack) -> None:
    sent: list[httpx.Request] = []

    def record(request: httpx.Request) -> None:
        sent.append(request)

    def run() -> tuple[str, str | None]:
        with (
            httpx.Client(event_hooks={"request": [record]}) as http,
            MoatClient(stack.url, stack.api_key, http_client=http, retry=QUICK) as moat,
        ):
            result = moat.execute(
                "demo.echo", {"poll": 1}, idempotency_key="poll-1", wait_seconds=0
            )
            assert not http.is_closed  # the caller's client stays the caller's
        return result.status, result.receipt_id

    status, receipt_id = await asyncio.to_thread(run)
    assert status == "executed"
    assert sent[0].method == "POST" and sent[0].headers["prefer"] == "wait=0"
    assert sent[1].method == "GET" and sent[1].url.path == f"/v1/executions/{receipt_id}"
    assert all(r.headers["authorization"] == f"Bearer {stack.api_key}" for r in sent)


@pytest.mark.parametrize("client_type", [MoatClient, AsyncMoatClient])
async def test_a_connection_that_hangs_gives_up_after_the_connect_timeout(
    client_type: type[MoatClient] | type[AsyncMoatClient],
) -> None:
    """A listener with a full backlog never completes a handshake: with
    ``connect_timeout`` the client stops waiting for it then, whatever the read timeout,
    and says why (the transport error is the cause)."""
    import socket
    import time

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    queued = [socket.socket() for _ in range(4)]
    for waiting in queued:
        waiting.setblocking(False)
        waiting.connect_ex(("127.0.0.1", port))
    await asyncio.sleep(0.2)
    once = RetryPolicy(max_attempts=1)
    url, key = f"http://127.0.0.1:{port}", "moat_k_" + "s" * 32
    started = time.monotonic()
    try:
        with pytest.raises(GatewayUnavailable) as caught:
            if client_type is MoatClient:
                with MoatClient(url, key, timeout=60, retry=once, connect_timeout=0.5) as moat:
                    await asyncio.to_thread(moat.list_receipts)
            else:
                async with AsyncMoatClient(
                    url, key, timeout=60, retry=once, connect_timeout=0.5
                ) as amoat:
                    await amoat.list_receipts()
    finally:
        for each in (*queued, listener):
            each.close()
    assert time.monotonic() - started < 5
    assert isinstance(caught.value.__cause__, httpx.ConnectTimeout)
