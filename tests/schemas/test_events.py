"""The projection's reducer: a batch of events as a ``RunDelta`` (what Postgres applies to
a run without reading it) moves a run exactly as ``apply`` folded over the same events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from schemas.events import AggregateType, Event, EventType, RunState, RunStatus, apply, delta

T0 = datetime(2026, 11, 1, tzinfo=UTC)


@st.composite
def runs(draw: st.DrawFn) -> RunState:
    return RunState(
        receipt_id="r-1",
        tenant_id="t-1",
        workflow_id="wf-1",
        run_id=draw(st.sampled_from(["run-a", "run-b"])),
        capability_id="demo.echo",
        status=draw(st.sampled_from(list(RunStatus))),
        total_steps=draw(st.integers(0, 5)),
        failed_steps=draw(st.integers(0, 5)),
        retries=draw(st.integers(0, 5)),
        replays=draw(st.integers(0, 5)),
        started_at=T0,
        completed_at=draw(st.none() | st.just(T0 + timedelta(seconds=1))),
        last_sequence=draw(st.integers(0, 3)),
    )


@st.composite
def batches(draw: st.DrawFn) -> list[Event]:
    kinds = draw(st.lists(st.sampled_from(list(EventType)), min_size=1, max_size=8))
    events = []
    for i, kind in enumerate(kinds):
        data: dict[str, Any] = {}
        if draw(st.booleans()):
            data["run_id"] = draw(st.sampled_from(["run-a", "run-c"]))
        if kind == EventType.RUN_FAILED and draw(st.booleans()):
            data["policy_denied"] = True
        events.append(
            Event(
                id=f"e-{i}",
                tenant_id="t-1",
                event_type=kind,
                aggregate_type=AggregateType.RUN,
                aggregate_id="r-1",
                event_data=data,
                correlation_id="r-1",
                actor="test",
                sequence_number=10 + i,
                occurred_at=T0 + timedelta(seconds=10 + i),
            )
        )
    return events


@given(runs(), batches())
def test_a_delta_moves_a_run_as_apply_does(state: RunState, events: list[Event]) -> None:
    folded: RunState | None = state
    for event in events:
        folded = apply(folded, event)
    assert delta(events).applied_to(state) == folded
