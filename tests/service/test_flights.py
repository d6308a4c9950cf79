"""On one gateway, identical requests in flight share the first one's run in memory: the
copies get the first one's answer (a replay only when it is a stored receipt: a run they
waited for is not), each with its own trace while the run is still going, and go their
own way when the first fails."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from schemas.execute import Envelope, EnvelopeStatus
from starter.service.executions.call import Outcome
from starter.service.executions.flights import Flights


def _outcome(status: EnvelopeStatus = EnvelopeStatus.EXECUTED, replayed: bool = False) -> Outcome:
    envelope = Envelope(trace_id="first", status=status, receipt_id="r", replayed=replayed)
    return Outcome(envelope, stored=replayed)


async def test_copies_in_flight_share_one_run_none_of_them_a_replay() -> None:
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
    # They waited for the run: the first request's answer, not a stored one.
    assert not any(o.replayed for o in await asyncio.gather(*copies))
    assert runs == 1 and len(flights) == 0
    # Once the flight has landed, the next copy runs again (and finds the stored receipt).
    await flights.share("k", run, "t5")
    assert runs == 2


async def test_copies_of_a_stored_answer_are_replays_like_it() -> None:
    flights, release = Flights(), asyncio.Event()

    async def stored() -> Outcome:
        await release.wait()
        return _outcome(replayed=True)

    first = asyncio.create_task(flights.share("k", stored, "t0"))
    await asyncio.sleep(0)
    copies = [asyncio.create_task(flights.share("k", stored, f"t{i}")) for i in range(1, 4)]
    await asyncio.sleep(0)
    release.set()
    assert (await first).replayed
    assert all(o.replayed and o.stored for o in await asyncio.gather(*copies))


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


async def test_the_first_is_answered_first_then_every_copy_before_any_resumes() -> None:
    """A landing flight answers the copies one after another, before any copy's request
    goes on: an answer does not wait for the copies before it to return."""
    flights, release, events = Flights(), asyncio.Event(), []

    async def run() -> Outcome:
        await release.wait()
        return _outcome()

    def answering(i: int) -> Callable[[Outcome], Awaitable[None]]:
        async def answer(outcome: Outcome) -> None:
            assert not outcome.replayed and outcome.envelope.trace_id == "first"
            events.append(f"answered {i}")

        return answer

    async def first() -> None:
        assert (await flights.share("k", run, "t0")).replayed is False
        events.append("first")

    async def copy(i: int) -> None:
        outcome = await flights.share("k", run, f"t{i}", answer=answering(i))
        assert outcome.answered and not outcome.replayed
        events.append(f"resumed {i}")

    leader = asyncio.create_task(first())
    await asyncio.sleep(0)
    copies = [asyncio.create_task(copy(i)) for i in range(1, 6)]
    await asyncio.sleep(0)
    release.set()
    await asyncio.gather(leader, *copies)
    assert events[0] == "first"
    assert events[1:6] == [f"answered {i}" for i in range(1, 6)]
    assert sorted(events[6:]) == [f"resumed {i}" for i in range(1, 6)]


async def test_a_copy_whose_answer_fails_raises_and_the_others_are_answered() -> None:
    flights, release, answered = Flights(), asyncio.Event(), []

    async def run() -> Outcome:
        await release.wait()
        return _outcome()

    async def broken(outcome: Outcome) -> None:
        raise ConnectionResetError("the copy's connection is gone")

    async def fine(outcome: Outcome) -> None:
        answered.append(outcome)

    first = asyncio.create_task(flights.share("k", run, "t0"))
    await asyncio.sleep(0)
    failing = asyncio.create_task(flights.share("k", run, "t1", answer=broken))
    others = [asyncio.create_task(flights.share("k", run, "t2", answer=fine)) for _ in range(3)]
    await asyncio.sleep(0)
    release.set()
    await first
    (raised,) = await asyncio.gather(failing, return_exceptions=True)
    assert isinstance(raised, ConnectionResetError)
    assert all(o.answered for o in await asyncio.gather(*others))
    assert len(answered) == 3


async def test_a_copy_that_stopped_waiting_is_not_answered() -> None:
    flights, release, answered = Flights(), asyncio.Event(), []

    async def run() -> Outcome:
        await release.wait()
        return _outcome()

    async def answer(outcome: Outcome) -> None:
        answered.append(outcome.envelope.trace_id)

    first = asyncio.create_task(flights.share("k", run, "t0"))
    await asyncio.sleep(0)
    gone = asyncio.create_task(flights.share("k", run, "gone", answer=answer))
    kept = asyncio.create_task(flights.share("k", run, "kept", answer=answer))
    await asyncio.sleep(0)
    gone.cancel()
    release.set()
    await first
    assert (await kept).answered
    assert gone.cancelled() and answered == ["first"]


async def test_when_the_first_fails_copies_left_to_be_answered_run_on_their_own() -> None:
    flights, release, runs = Flights(), asyncio.Event(), []

    async def failing() -> Outcome:
        await release.wait()
        raise RuntimeError("the first copy failed")

    async def own() -> Outcome:
        runs.append("copy")
        return _outcome()

    async def answer(outcome: Outcome) -> None:
        raise AssertionError("a failed flight answers nobody")

    first = asyncio.create_task(flights.share("k", failing, "t0"))
    await asyncio.sleep(0)
    copy = asyncio.create_task(flights.share("k", own, "t1", answer=answer))
    await asyncio.sleep(0)
    release.set()
    outcome = await copy
    assert not outcome.answered and not outcome.replayed and runs == ["copy"]
    (failed,) = await asyncio.gather(first, return_exceptions=True)
    assert isinstance(failed, RuntimeError)
