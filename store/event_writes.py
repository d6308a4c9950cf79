"""One execution's events written and its ``runs`` projection moved in one statement.

The statement (data-modifying CTEs, a fixed text: the drafts travel as one ``jsonb``
parameter) inserts the drafts in order, skipping ids already present; fills the first
one's cause, when asked, with the execution's latest event in the log; and, only when every
draft was written, moves the projection by the change ``schemas.events.delta`` computes
from the drafts. When some draft was skipped (a retried step), the projection is left for
the caller to move by the events actually written (``store.events._project``).

The change is computed before the events exist: every event of the statement has the same
``occurred_at`` (the transaction's ``now()``, the column's default) and the last written
has the highest ``sequence_number``, so those two are filled in by SQL.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import TextClause, text

from schemas.events import Event, EventDraft, RunState, apply, delta

_WRITE = """
WITH latest AS (
    SELECT id FROM orchestration_events
    WHERE tenant_id = :tenant_id AND correlation_id = :correlation_id
    ORDER BY sequence_number DESC LIMIT 1
), written AS (
    INSERT INTO orchestration_events (id, tenant_id, event_type, aggregate_type,
        aggregate_id, event_data, correlation_id, causation_id, actor)
    SELECT d.id, d.tenant_id, d.event_type, d.aggregate_type, d.aggregate_id, d.event_data,
        d.correlation_id,
        CASE WHEN d.position = 0 AND :first_cause_from_log
            THEN (SELECT id FROM latest) ELSE d.causation_id END,
        d.actor
    FROM jsonb_to_recordset(CAST(:drafts AS jsonb)) AS d(position int, id text,
        tenant_id text, event_type text, aggregate_type text, aggregate_id text,
        event_data jsonb, correlation_id text, causation_id text, actor text)
    ORDER BY d.position
    ON CONFLICT (id) DO NOTHING
    RETURNING *
), whole AS (
    -- One row when every draft was written, none when some was skipped.
    SELECT max(sequence_number) AS last_sequence FROM written HAVING count(*) = :count
)"""

# A run that exists moved by a ``RunDelta`` (its fields as ``d_*`` parameters): counters
# added in SQL, so concurrent appends need no lock.
_MOVED = """
    total_steps = runs.total_steps + :d_total_steps,
    failed_steps = runs.failed_steps + :d_failed_steps,
    retries = runs.retries + :d_retries,
    replays = runs.replays + :d_replays,
    status = coalesce(:d_status, runs.status),
    completed_at = CASE WHEN :d_completed
        THEN (CASE WHEN :d_completed_now THEN now() END) ELSE runs.completed_at END,
    run_id = coalesce(:d_run_id, runs.run_id),
    last_sequence = greatest(runs.last_sequence, (SELECT last_sequence FROM whole))"""

# The batch moves the execution's run, if there is one.
_MOVING = (
    _WRITE
    + f""", moved AS (
    UPDATE runs SET {_MOVED}
    WHERE receipt_id = :correlation_id AND EXISTS (SELECT 1 FROM whole)
)"""
)

# The batch starts the run: it is inserted (or, a run started again, the one there moved).
_STARTING = (
    _WRITE
    + f""", started AS (
    INSERT INTO runs (receipt_id, tenant_id, workflow_id, run_id, capability_id, status,
        total_steps, failed_steps, retries, replays, started_at, completed_at, last_sequence)
    SELECT :correlation_id, :tenant_id, :s_workflow_id, :s_run_id, :s_capability_id,
        :s_status, :s_total_steps, :s_failed_steps, :s_retries, :s_replays, now(),
        CASE WHEN :s_completed_now THEN now() END, whole.last_sequence
    FROM whole
    ON CONFLICT (receipt_id) DO UPDATE SET {_MOVED}
)"""
)

_WRITTEN = "\nSELECT * FROM written"
APPEND_MOVING = text(_MOVING + _WRITTEN)
APPEND_STARTING = text(_STARTING + _WRITTEN)

# For a transaction whose COMMIT goes with the statement (``committing``): a batch some of
# whose drafts were skipped fails (a division by zero), so that the COMMIT does not run; its
# projection must move by the events written, which only a later statement can do.
PARTIAL = "22012"
_WHOLE_OR_NONE = """
SELECT * FROM written
WHERE 1 / (SELECT CASE WHEN count(*) BETWEEN 1 AND :count - 1 THEN 0 ELSE 1 END FROM written)
    = 1"""


def _driver(sql: str) -> str:
    """``sql`` with psycopg's parameters (``%(name)s``) for ``text``'s (``:name``)."""
    assert "%" not in sql and "::" not in sql
    return re.sub(r"(?<![:\w]):(\w+)", r"%(\1)s", sql)


_COMMITTING = {
    APPEND_MOVING: _driver(_MOVING + _WHOLE_OR_NONE),
    APPEND_STARTING: _driver(_STARTING + _WHOLE_OR_NONE),
}

# Stands for the events' ``occurred_at`` (the statement's ``now()``) while the change is
# computed in Python.
_WRITTEN_AT = datetime(1, 1, 1, tzinfo=UTC)


def _at_write(value: datetime | None) -> bool:
    """Whether a time the change sets is the events' ``occurred_at`` (else it is None)."""
    assert value in (None, _WRITTEN_AT)
    return value is not None


def statement(
    drafts: Sequence[EventDraft], first_cause_from_log: bool
) -> tuple[TextClause, dict[str, Any]]:
    """The statement writing ``drafts`` (one execution's, at least one) and its parameters."""
    first = drafts[0]
    events = [Event(**d.model_dump(), sequence_number=0, occurred_at=_WRITTEN_AT) for d in drafts]
    change = delta(events)
    started: RunState | None = None
    for event in events:
        started = apply(started, event)
    params: dict[str, Any] = {
        "tenant_id": first.tenant_id,
        "correlation_id": first.correlation_id,
        "first_cause_from_log": first_cause_from_log,
        "drafts": json.dumps(
            [{"position": i, **d.model_dump(mode="json")} for i, d in enumerate(drafts)]
        ),
        "count": len(drafts),
        "d_total_steps": change.total_steps,
        "d_failed_steps": change.failed_steps,
        "d_retries": change.retries,
        "d_replays": change.replays,
        "d_status": change.status.value if change.status is not None else None,
        "d_completed": change.completed,
        "d_completed_now": _at_write(change.completed_at),
        "d_run_id": change.run_id,
    }
    if started is None:
        return APPEND_MOVING, params
    assert started.started_at == _WRITTEN_AT
    params |= {
        "s_workflow_id": started.workflow_id,
        "s_run_id": started.run_id,
        "s_capability_id": started.capability_id,
        "s_status": started.status.value,
        "s_total_steps": started.total_steps,
        "s_failed_steps": started.failed_steps,
        "s_retries": started.retries,
        "s_replays": started.replays,
        "s_completed_now": _at_write(started.completed_at),
    }
    return APPEND_STARTING, params


def committing(
    drafts: Sequence[EventDraft], first_cause_from_log: bool
) -> tuple[str, dict[str, Any]]:
    """``statement`` as driver SQL (``store.db.pipelined_rows``), for a transaction whose
    COMMIT is sent with it: a batch some of whose drafts were already there fails with the
    SQLSTATE ``PARTIAL`` instead of being written."""
    stmt, params = statement(drafts, first_cause_from_log)
    return _COMMITTING[stmt], params
