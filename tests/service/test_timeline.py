"""The causal tree of an execution's events: each under its cause, siblings in sequence."""

from __future__ import annotations

from datetime import UTC, datetime

from schemas.events import AggregateType, Event, EventType
from starter.service.timeline import Node, causal_tree


def event(id: str, seq: int, cause: str | None = None) -> Event:
    return Event(
        id=id,
        tenant_id="t",
        event_type=EventType.STEP_STARTED,
        aggregate_type=AggregateType.STEP,
        aggregate_id="a",
        correlation_id="rcpt",
        causation_id=cause,
        actor="moat",
        sequence_number=seq,
        occurred_at=datetime(2026, 11, 27, tzinfo=UTC),
    )


def shape(nodes: list[Node]) -> list[object]:
    return [(n.event.id, shape(n.children)) if n.children else n.event.id for n in nodes]


def test_events_hang_under_their_cause_in_sequence_order() -> None:
    events = [
        event("c", 3, "a"),
        event("a", 1),
        event("b", 2, "a"),
        event("d", 4, "b"),
        event("e", 5, "elsewhere"),
    ]
    assert shape(causal_tree(events)) == [("a", [("b", ["d"]), "c"]), "e"]


def test_a_cycle_shows_every_event_once() -> None:
    events = [event("a", 1, "b"), event("b", 2, "a"), event("c", 3, "c")]
    assert shape(causal_tree(events)) == [("b", ["a"]), "c"]
