"""Where a fresh execution's time goes, against the floor's: each request's wall time cut
into segments from its run's Temporal history (the server's event timestamps), so the gap
to the floor can be pinned on a step instead of guessed at.

Segments of one request:

* ``outside the run``: the request's wall time less the run's (start event to close
  event). For Moat: the HTTP hop, the gateway's key and stored-answer look-up, the start
  call and the wait for the result; for the floor: its client's start and result calls.
* ``first workflow task``: started to completed. Moat's runs the policy step in it (a local
  activity), the floor's only schedules its activity.
* ``the activity``: started to completed (Moat: the adapter step, with its events and,
  for a success, the record: receipt, manifest, events).
* ``second workflow task``: started to completed. Both only complete the run (Moat's runs
  the record step in it, a local activity, when the attempt could not record itself).
* ``Temporal in between``: the rest of the run (tasks waiting to be picked up, the server
  persisting them).

Each row is the median of that segment over the requests, so rows need not add up to the
median of the whole.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

SEGMENTS = (
    "outside the run",
    "first workflow task",
    "the activity",
    "second workflow task",
    "Temporal in between",
)


def _ms(later: Any, earlier: Any) -> float:
    return float((later.ToDatetime() - earlier.ToDatetime()).total_seconds() * 1000)


def segments(events: Sequence[Any], request_ms: float) -> dict[str, float] | None:
    """The segments of one request whose run is ``events`` (a history's), or None for a
    run of another shape (a retried activity, a failed task)."""
    tasks: list[tuple[Any, Any]] = []
    activities: list[tuple[Any, Any]] = []
    task_started = activity_started = None
    first = events[0].event_time
    closed = None
    for event in events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            task_started = event.event_time
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED and task_started is not None:
            tasks.append((task_started, event.event_time))
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            activity_started = event.event_time
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED and activity_started:
            activities.append((activity_started, event.event_time))
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            closed = event.event_time
    if closed is None or len(tasks) != 2 or len(activities) != 1:
        return None
    run_ms = _ms(closed, first)
    parts = {
        "first workflow task": _ms(tasks[0][1], tasks[0][0]),
        "the activity": _ms(activities[0][1], activities[0][0]),
        "second workflow task": _ms(tasks[1][1], tasks[1][0]),
    }
    parts["Temporal in between"] = run_ms - sum(parts.values())
    parts["outside the run"] = request_ms - run_ms
    return parts


async def breakdown(client: Client, runs: Sequence[tuple[str, float]]) -> dict[str, Any]:
    """The median of every segment over ``runs`` (workflow id, request wall ms)."""
    cut: list[dict[str, float]] = []
    for workflow_id, request_ms in runs:
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        parts = segments(history.events, request_ms)
        if parts is not None:
            cut.append(parts)
    if not cut:
        return {"n": 0}
    medians = {name: round(statistics.median(p[name] for p in cut), 2) for name in SEGMENTS}
    return {"n": len(cut), "p50_ms": medians}


def compared(moat: dict[str, Any], floor: dict[str, Any]) -> list[tuple[str, float, float]]:
    """Rows of (segment, Moat p50, floor p50), for the segments both have."""
    if not moat.get("n") or not floor.get("n"):
        return []
    return [(name, moat["p50_ms"][name], floor["p50_ms"][name]) for name in SEGMENTS]
