"""An execution's events as their causal tree: each event under the event that caused it
(``causation_id``), siblings in sequence order. An event whose cause is not in the log
(none, or an event of another log) is a root."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from schemas.events import Event


@dataclass
class Node:
    """One event and the events it caused, in sequence order."""

    event: Event
    children: list[Node] = field(default_factory=list)


def causal_tree(events: Sequence[Event]) -> list[Node]:
    """The roots of ``events``' causal tree, each subtree in sequence order. A cycle (which
    a well-formed log cannot hold) is cut at its first event, so every event is shown once."""
    ordered = sorted(events, key=lambda e: e.sequence_number)
    nodes = {e.id: Node(e) for e in ordered}
    roots: list[Node] = []
    for event in ordered:
        parent = nodes.get(event.causation_id) if event.causation_id else None
        if parent is None or parent is nodes[event.id] or _descends(parent, nodes[event.id]):
            roots.append(nodes[event.id])
        else:
            parent.children.append(nodes[event.id])
    return roots


def _descends(node: Node, ancestor: Node) -> bool:
    """Whether ``node`` is already under ``ancestor`` (linking them would make a cycle)."""
    stack = list(ancestor.children)
    while stack:
        current = stack.pop()
        if current is node:
            return True
        stack.extend(current.children)
    return False
