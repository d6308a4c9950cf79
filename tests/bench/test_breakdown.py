"""``bench.breakdown`` cuts a real execution's wall time into the segments it names, from
the run's own history, and refuses runs of another shape rather than misplacing time."""

from __future__ import annotations

import time
import uuid

from bench.breakdown import SEGMENTS, breakdown, compared, segments
from tests.support.stack import Stack


async def test_a_real_execution_is_cut_into_its_segments(stack: Stack) -> None:
    started = time.perf_counter()
    resp = await stack.execute("demo.echo", {"n": 1}, key=f"bd-{uuid.uuid4().hex}")
    wall_ms = (time.perf_counter() - started) * 1000
    assert resp.status_code == 200, resp.text
    workflow_id = resp.json()["workflow_id"]
    history = await stack.client.get_workflow_handle(workflow_id).fetch_history()

    parts = segments(history.events, wall_ms)
    assert parts is not None and set(parts) == set(SEGMENTS)
    assert all(ms >= 0 for ms in parts.values()), parts
    # The segments partition the request: nothing counted twice or lost.
    assert abs(sum(parts.values()) - wall_ms) < 0.01
    # A run cut short (no close event) is another shape: not guessed at.
    assert segments(history.events[:-1], wall_ms) is None

    found = await breakdown(stack.client, [(workflow_id, wall_ms)])
    assert found["n"] == 1 and found["p50_ms"]["the activity"] == round(parts["the activity"], 2)
    rows = compared(found, found)
    assert [name for name, _, _ in rows] == list(SEGMENTS)
    assert compared(found, {"n": 0}) == []
