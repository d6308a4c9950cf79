"""How long an execute call reads its answer, without any server: always past the wait it
asked the gateway for (``Prefer: wait=N``), so the gateway answers first (``accepted`` at
worst, then polled) and a slow first run is never sent again and taken for a replay."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from moat_client import AsyncMoatClient, MoatClient

RECEIPT = "0194d6c2-0000-7000-8000-000000000000"
ENVELOPE = {"receipt_id": RECEIPT, "trace_id": "t", "status": "executed"}

# (client timeout, wait_seconds given) -> (Prefer sent, read timeout of the POST)
CASES = [
    pytest.param(30.0, None, "wait=20", 30.0, id="default: wait ends 10 s before the timeout"),
    pytest.param(4.0, None, "wait=2", 4.0, id="short timeout: half of it"),
    pytest.param(30.0, 2.0, "wait=2", 30.0, id="short wait: the timeout"),
    pytest.param(30.0, 60.0, "wait=60", 70.0, id="long wait: the wait and a margin"),
    pytest.param(5.0, 0.0, "wait=0", 10.0, id="no wait: the margin"),
]


class Seen:
    """The execute requests a transport was sent: their ``Prefer`` and read timeout."""

    def __init__(self) -> None:
        self.posts: list[tuple[str | None, float]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        timeout: dict[str, Any] = request.extensions["timeout"]
        self.posts.append((request.headers.get("Prefer"), timeout["read"]))
        return httpx.Response(200, json=ENVELOPE)


@pytest.mark.parametrize(("client_timeout", "wait", "prefer", "read"), CASES)
def test_the_sync_client_reads_past_the_wait_it_asks_for(
    client_timeout: float, wait: float | None, prefer: str, read: float
) -> None:
    seen = Seen()
    transport = httpx.MockTransport(seen)
    with MoatClient(
        "http://127.0.0.1:9", "moat_k_s", timeout=client_timeout, transport=transport
    ) as m:
        m.execute("demo.echo", {"n": 1}, idempotency_key="k", wait_seconds=wait)
    assert seen.posts == [(prefer, read)]


@pytest.mark.parametrize(("client_timeout", "wait", "prefer", "read"), CASES)
async def test_the_async_client_reads_past_the_wait_it_asks_for(
    client_timeout: float, wait: float | None, prefer: str, read: float
) -> None:
    seen = Seen()
    transport = httpx.MockTransport(seen)
    async with AsyncMoatClient(
        "http://127.0.0.1:9", "moat_k_s", timeout=client_timeout, transport=transport
    ) as moat:
        await moat.execute("demo.echo", {"n": 1}, idempotency_key="k", wait_seconds=wait)
    assert seen.posts == [(prefer, read)]


def test_the_envelope_says_replayed_even_without_the_header() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={**ENVELOPE, "replayed": True})

    with MoatClient(
        "http://127.0.0.1:9", "moat_k_s", transport=httpx.MockTransport(answer)
    ) as moat:
        result = moat.execute("demo.echo", {"n": 1}, idempotency_key="k")
    assert result.replayed and result.envelope.replayed
