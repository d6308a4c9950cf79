"""A burst of identical requests: one effect and one receipt for all of them, and no answer
a replay (they all waited for the one run); on one gateway the copies share the first
one's run in memory (the flights' own rules: ``tests/service/test_flights.py``)."""

from __future__ import annotations

import asyncio
import uuid

from schemas.names import REPLAYED_HEADER, TRACE_HEADER
from tests.support.fakes import FakeProvider, Step
from tests.support.stack import Stack


async def test_a_burst_of_copies_causes_one_effect(stack: Stack, provider: FakeProvider) -> None:
    url = provider.script(f"/burst/{uuid.uuid4().hex}", Step(delay=0.5))
    path = url.removeprefix(provider.base_url)
    request = {"method": "POST", "url": url, "json": {"n": 1}}
    answers = await asyncio.gather(
        *(stack.execute("http.request", request, key="burst") for _ in range(20))
    )
    assert {a.status_code for a in answers} == {200}
    assert len({a.json()["receipt_id"] for a in answers}) == 1
    assert not any(REPLAYED_HEADER in a.headers or a.json()["replayed"] for a in answers)
    assert len(provider.calls_to(path)) == 1
    # The copies, answered by the flight, get the first answer's bytes and their own trace.
    assert len({a.content for a in answers}) == 1
    assert len({a.headers[TRACE_HEADER] for a in answers}) == len(answers)
