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


def _event(i: int, kind: EventType, **data: Any) -> Event:
    return Event(
        id=f"e-{i}",
        tenant_id="t-1",
        event_type=kind,
        aggregate_type=AggregateType.RUN,
        aggregate_id="r-1",
        event_data=data,
        correlation_id="r-1",
        actor="test",
        sequence_number=i,
        occurred_at=T0 + timedelta(seconds=i),
    )


def test_a_cancelled_run_is_cancelled_until_a_later_run_records_it() -> None:
    """An operator's cancel ends the run CANCELLED; a run resuming the execution later
    starts it again and its outcome decides, as the events' order has it."""
    cancelled = [
        _event(1, EventType.RUN_STARTED, run_id="run-a"),
        _event(2, EventType.SIGNAL_PROCESSING_STARTED, run_id="run-a"),
        _event(3, EventType.RUN_CANCELLED, run_id="run-a", how="terminated"),
    ]
    state: RunState | None = None
    for event in cancelled:
        state = apply(state, event)
    assert state is not None and state.status == RunStatus.CANCELLED
    assert state.completed_at == T0 + timedelta(seconds=3)
    resumed = [
        _event(4, EventType.RUN_STARTED, run_id="run-b"),
        _event(5, EventType.RUN_COMPLETED, run_id="run-b"),
    ]
    ended = delta(resumed).applied_to(state)
    assert (ended.status, ended.run_id) == (RunStatus.COMPLETED, "run-b")
