"""A request that attaches to an execution still running for its key (a duplicate, or a
client's retry after it stopped reading) waits for that run and gets its answer: not a
replay. Only a receipt recorded before the request is one (``replayed`` in the envelope,
``X-Moat-Idempotent-Replayed: true``)."""

from __future__ import annotations

import asyncio
import uuid

from schemas.names import REPLAYED_HEADER
from tests.support.fakes import FakeProvider, Step
from tests.support.stack import Stack


async def test_an_attach_to_a_running_execution_is_not_a_replay(
    stack: Stack, provider: FakeProvider
) -> None:
    url = provider.script(f"/slow/{uuid.uuid4().hex}", Step(delay=3.0))
    path = url.removeprefix(provider.base_url)
    request = {"method": "POST", "url": url, "json": {"n": 1}}
    key = f"slow-{uuid.uuid4().hex}"
    first = asyncio.create_task(
        stack.execute("http.request", request, key=key, headers_extra={"Prefer": "wait=20"})
    )
    await asyncio.sleep(1.0)
    # Another wait: no copy of the first's flight, so it attaches to the run in Temporal.
    attached = await stack.execute(
        "http.request", request, key=key, headers_extra={"Prefer": "wait=19"}
    )
    answers = [await first, attached]
    assert [a.status_code for a in answers] == [200, 200], attached.text
    assert [a.headers.get(REPLAYED_HEADER) for a in answers] == [None, None]
    assert [a.json().get("replayed") for a in answers] == [False, False]
    assert {a.json()["status"] for a in answers} == {"executed"}
    assert answers[0].json()["receipt_id"] == answers[1].json()["receipt_id"]

    # Once the receipt is recorded, a repeat is answered with it: a replay.
    again = await stack.execute("http.request", request, key=key)
    assert again.headers[REPLAYED_HEADER] == "true" and again.json()["replayed"] is True
    assert again.json()["receipt_id"] == answers[0].json()["receipt_id"]
    assert len(provider.calls_to(path)) == 1
