"""A burst of identical requests: one effect and one receipt for all of them, one answer
that is not a replay; on one gateway the copies share the first one's run in memory."""

from __future__ import annotations

import asyncio
import uuid

from schemas.execute import Envelope, EnvelopeStatus
from schemas.names import REPLAYED_HEADER
from starter.service.executions import Outcome
from starter.service.flights import Flights
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
    assert sum(1 for a in answers if a.headers.get(REPLAYED_HEADER) != "true") == 1
    assert len(provider.calls_to(path)) == 1


def _outcome(status: EnvelopeStatus = EnvelopeStatus.EXECUTED) -> Outcome:
    return Outcome(Envelope(trace_id="first", status=status, receipt_id="r"))


async def test_copies_in_flight_share_one_run_answered_as_replays() -> None:
    flights, runs, release = Flights(), 0, asyncio.Event()

    async def run() -> Outcome:
        nonlocal runs
        runs += 1
        await release.wait()
        return _outcome()

    first = asyncio.create_task(flights.share("k", run, "t0"))
    await asyncio.sleep(0)
    copies = [asyncio.create_task(flights.share("k", run, f"t{i}")) for i in range(1, 5)]
    await asyncio.sleep(0)
    release.set()
    assert (await first).replayed is False
    assert all(o.replayed for o in await asyncio.gather(*copies))
    assert runs == 1 and len(flights) == 0
    # Once the flight has landed, the next copy runs again (and finds the stored receipt).
    await flights.share("k", run, "t5")
    assert runs == 2


async def test_a_copy_of_an_accepted_run_keeps_its_own_trace() -> None:
    flights, release = Flights(), asyncio.Event()

    async def run() -> Outcome:
        await release.wait()
        return _outcome(EnvelopeStatus.ACCEPTED)

    first = asyncio.create_task(flights.share("k", run, "first"))
    await asyncio.sleep(0)
    copy = asyncio.create_task(flights.share("k", run, "mine"))
    await asyncio.sleep(0)
    release.set()
    assert (await first).envelope.trace_id == "first"
    assert (await copy).envelope.trace_id == "mine"


async def test_when_the_first_fails_the_copies_run_on_their_own() -> None:
    flights, release, runs = Flights(), asyncio.Event(), []

    async def failing() -> Outcome:
        runs.append("first")
        await release.wait()
        raise RuntimeError("the first copy failed")

    async def own() -> Outcome:
        runs.append("copy")
        return _outcome()

    first = asyncio.create_task(flights.share("k", failing, "t0"))
    await asyncio.sleep(0)
    copy = asyncio.create_task(flights.share("k", own, "t1"))
    await asyncio.sleep(0)
    release.set()
    assert (await copy).replayed is False
    assert runs == ["first", "copy"]
    (failed,) = await asyncio.gather(first, return_exceptions=True)
    assert isinstance(failed, RuntimeError)
    assert len(flights) == 0
