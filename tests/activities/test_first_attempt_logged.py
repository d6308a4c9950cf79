"""The adapter's first attempt's start (``STEP_STARTED``, ``TOOL_CALLED``) is written by the
policy check, in its transaction, when the check lets the run call at once
(``PolicyInput.log_first_attempt``): the attempt goes to the provider with no transaction
of its own before the call. Later attempts write their own start, as before."""

from __future__ import annotations

from typing import Any

import pytest

from activities.execute.adapter import AdapterStep
from activities.execute.events import ADAPTER_ACTOR
from schemas.events import Event, EventType
from store import events as event_log
from tests.support.fakes import FakeProvider, Step
from tests.support.stack import Stack


def _count_event_writes(monkeypatch: pytest.MonkeyPatch) -> list[list[EventType]]:
    """The adapter step's own event transactions, by the events each wrote."""
    writes: list[list[EventType]] = []
    original = AdapterStep._adapter_events

    async def counted(self: AdapterStep, inp: Any, run_id: str, events: Any) -> None:
        writes.append([d.event_type for d in events])
        await original(self, inp, run_id, events)

    monkeypatch.setattr(AdapterStep, "_adapter_events", counted)
    return writes


async def _events(stack: Stack, body: dict[str, Any]) -> list[Event]:
    async with stack.sessions() as session:
        tenant_id = body["receipt"]["tenant_id"]
        return await event_log.events_of(session, tenant_id, body["receipt_id"])


def _of(events: list[Event], kind: EventType) -> list[Event]:
    return [e for e in events if e.event_type == kind]


async def test_the_first_attempt_s_start_is_written_with_the_decision(
    stack: Stack, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes = _count_event_writes(monkeypatch)
    url = provider.script("/once", Step(201, body={"id": "made"}))
    resp = await stack.execute("http.request", {"method": "POST", "url": url})
    assert resp.status_code == 200, resp.text
    events = await _events(stack, resp.json())
    assert writes == []  # the attempt wrote no transaction of events of its own
    [evaluated] = _of(events, EventType.POLICY_EVALUATED)
    [started] = _of(events, EventType.STEP_STARTED)
    [called] = _of(events, EventType.TOOL_CALLED)
    # In the check's transaction (its now()), the adapter step's as it would write them.
    assert started.occurred_at == called.occurred_at == evaluated.occurred_at
    assert started.actor == called.actor == ADAPTER_ACTOR
    assert called.event_data["attempt"] == 1
    assert [e.sequence_number for e in events] == sorted(e.sequence_number for e in events)
    assert events.index(called) < events.index(_of(events, EventType.TOOL_COMPLETED)[0])
    async with stack.sessions() as session:
        assert await event_log.verify(session, resp.json()["receipt"]["tenant_id"]) == []


async def test_a_retry_writes_its_own_start(
    fast: Stack, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes = _count_event_writes(monkeypatch)
    url = provider.script("/flaky", Step(500), Step(200, {"done": True}))
    resp = await fast.execute("test.http", {"method": "POST", "url": url}, key="flaky")
    assert resp.status_code == 200, resp.text
    assert len(provider.calls_to("/flaky")) == 2
    events = await _events(fast, resp.json())
    # Attempt 1's failure, then attempt 2's start: its own transactions.
    assert writes == [
        [EventType.TOOL_FAILED, EventType.EFFECT_RETRYING],
        [EventType.STEP_RETRIED, EventType.TOOL_CALLED],
    ]
    called = _of(events, EventType.TOOL_CALLED)
    assert [e.event_data["attempt"] for e in called] == [1, 2]
    [evaluated] = _of(events, EventType.POLICY_EVALUATED)
    assert called[0].occurred_at == evaluated.occurred_at
    assert called[1].occurred_at > evaluated.occurred_at
    assert len(_of(events, EventType.STEP_STARTED)) == 1
