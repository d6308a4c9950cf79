"""The event log's vocabulary (``SIGNAL_*``, ``RUN_*``, ``STEP_*``, ``EFFECT_*``, ``TOOL_*``
and manifest events, each with its correlation and causation) and the reducer that derives
a run's state.

The same ``apply`` builds the ``runs`` projection as events are written and rebuilds it
from scratch for ``moat runs rebuild --verify``, so the two can be compared.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from schemas.records import OUTCOME_UNKNOWN


class EventType(StrEnum):
    RUN_STARTED = "RUN_STARTED"
    RUN_COMPLETED = "RUN_COMPLETED"
    RUN_FAILED = "RUN_FAILED"
    RUN_REPLAYED = "RUN_REPLAYED"
    POLICY_EVALUATED = "POLICY_EVALUATED"
    STEP_STARTED = "STEP_STARTED"
    STEP_COMPLETED = "STEP_COMPLETED"
    STEP_FAILED = "STEP_FAILED"
    STEP_RETRIED = "STEP_RETRIED"
    EFFECT_REQUESTED = "EFFECT_REQUESTED"
    EFFECT_COMPLETED = "EFFECT_COMPLETED"
    EFFECT_FAILED = "EFFECT_FAILED"
    EFFECT_RETRYING = "EFFECT_RETRYING"
    EFFECT_DEAD_LETTERED = "EFFECT_DEAD_LETTERED"
    # A repeated attempt of a ``reconcile`` adapter looked for its mark at the provider.
    EFFECT_RECONCILED = "EFFECT_RECONCILED"
    TOOL_CALLED = "TOOL_CALLED"
    TOOL_COMPLETED = "TOOL_COMPLETED"
    TOOL_FAILED = "TOOL_FAILED"
    MANIFEST_WRITTEN = "MANIFEST_WRITTEN"
    MANIFEST_EXPIRED = "MANIFEST_EXPIRED"
    APPROVAL_REQUESTED = "APPROVAL_REQUESTED"
    APPROVAL_GRANTED = "APPROVAL_GRANTED"
    APPROVAL_REJECTED = "APPROVAL_REJECTED"
    APPROVAL_EXPIRED = "APPROVAL_EXPIRED"
    DEAD_LETTER_REQUEUED = "DEAD_LETTER_REQUEUED"
    DEAD_LETTER_RESOLVED = "DEAD_LETTER_RESOLVED"
    # Intake: a request (a plan, or an execution) accepted, taken up, and its end.
    SIGNAL_RECEIVED = "SIGNAL_RECEIVED"
    SIGNAL_PROCESSING_STARTED = "SIGNAL_PROCESSING_STARTED"
    SIGNAL_PROCESSED = "SIGNAL_PROCESSED"
    SIGNAL_PROCESSING_FAILED = "SIGNAL_PROCESSING_FAILED"
    # A plan's step not run because its ``when`` did not hold.
    STEP_SKIPPED = "STEP_SKIPPED"
    # A plan's state after a step: the receipts so far, what a resume starts from.
    RUN_CHECKPOINT_CREATED = "RUN_CHECKPOINT_CREATED"
    # A run stopped by a person (a plan's cancel, a Temporal cancel or terminate).
    RUN_CANCELLED = "RUN_CANCELLED"
    # A plan's completed step undone by its ``compensate`` call.
    STEP_COMPENSATED = "STEP_COMPENSATED"


class AggregateType(StrEnum):
    RUN = "RUN"
    STEP = "STEP"
    EFFECT = "EFFECT"
    POLICY = "POLICY"
    MANIFEST = "MANIFEST"
    APPROVAL = "APPROVAL"
    DEAD_LETTER = "DEAD_LETTER"
    SIGNAL = "SIGNAL"
    PLAN = "PLAN"


_EVENT_NAMESPACE = uuid.UUID("0c8a3f52-5d0e-4b1f-8f7e-3a9d6c4b2e10")


def event_id(correlation_id: str, run_id: str, name: str) -> str:
    """Deterministic: a retried step writes the same event id, which the log ignores."""
    return str(uuid.uuid5(_EVENT_NAMESPACE, f"{correlation_id}|{run_id}|{name}"))


class EventDraft(BaseModel):
    """An event to append; ``sequence_number`` and ``occurred_at`` come from the database."""

    model_config = ConfigDict(frozen=True)

    id: str
    tenant_id: str
    event_type: EventType
    aggregate_type: AggregateType
    aggregate_id: str
    event_data: dict[str, Any] = Field(default_factory=dict)
    correlation_id: str
    causation_id: str | None = None
    actor: str


class Event(EventDraft):
    sequence_number: int
    occurred_at: datetime


class RunStatus(StrEnum):
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    DENIED = "DENIED"
    # Its Temporal run terminated or cancelled by an operator before it recorded an outcome.
    CANCELLED = "CANCELLED"


class RunState(BaseModel):
    """A row of the ``runs`` projection."""

    receipt_id: str
    tenant_id: str
    workflow_id: str
    run_id: str
    capability_id: str
    status: RunStatus
    total_steps: int = 0
    failed_steps: int = 0
    retries: int = 0
    replays: int = 0
    started_at: datetime
    completed_at: datetime | None = None
    last_sequence: int


def apply(state: RunState | None, event: Event) -> RunState | None:
    """The run after ``event``; events of other aggregates leave it as it is. A run that
    exists moves by the event's ``RunDelta``: the rebuild and the projection's SQL follow
    one set of rules."""
    if state is not None:
        return delta([event]).applied_to(state)
    if event.event_type != EventType.RUN_STARTED:
        return None
    data = event.event_data
    return RunState(
        receipt_id=event.correlation_id,
        tenant_id=event.tenant_id,
        workflow_id=str(data.get("workflow_id", "")),
        run_id=str(data.get("run_id", "")),
        capability_id=str(data.get("capability_id", "")),
        status=RunStatus.RUNNING,
        started_at=event.occurred_at,
        last_sequence=event.sequence_number,
    )


class RunDelta(BaseModel):
    """What events do to a run that exists, in terms Postgres applies to the row without it
    being read first (``store.events``): counters to add, and the fields the last of the
    events that set them left. ``apply`` folded over the same events gives the same run."""

    total_steps: int = 0
    failed_steps: int = 0
    retries: int = 0
    replays: int = 0
    status: RunStatus | None = None  # None: unchanged
    completed: bool = False  # completed_at set, to ``completed_at`` (None included)
    completed_at: datetime | None = None
    run_id: str | None = None  # None: unchanged
    last_sequence: int

    def applied_to(self, state: RunState) -> RunState:
        return state.model_copy(
            update={
                "total_steps": state.total_steps + self.total_steps,
                "failed_steps": state.failed_steps + self.failed_steps,
                "retries": state.retries + self.retries,
                "replays": state.replays + self.replays,
                "status": self.status or state.status,
                "completed_at": self.completed_at if self.completed else state.completed_at,
                "run_id": self.run_id if self.run_id is not None else state.run_id,
                "last_sequence": max(state.last_sequence, self.last_sequence),
            }
        )


def delta(events: list[Event]) -> RunDelta:
    """``events`` (in sequence order, at least one) as one ``RunDelta`` for a run that
    exists: a started run again is running again (its run id from the event), a step counts,
    a failed one twice, a retry or a replay counts, the run's end (completed, failed or
    cancelled) sets its status and time. A cancelled execution resumed by a later run ends
    as that run records: the events' order decides."""
    out = RunDelta(last_sequence=events[-1].sequence_number)
    for event in events:
        data = event.event_data
        match event.event_type:
            case EventType.RUN_STARTED:
                if "run_id" in data:
                    out.run_id = str(data["run_id"])
                out.status, out.completed, out.completed_at = RunStatus.RUNNING, True, None
            case EventType.POLICY_EVALUATED | EventType.STEP_COMPLETED:
                out.total_steps += 1
            case EventType.STEP_FAILED:
                out.total_steps += 1
                out.failed_steps += 1
            case EventType.STEP_RETRIED:
                out.retries += 1
            case EventType.RUN_COMPLETED:
                out.status, out.completed = RunStatus.COMPLETED, True
                out.completed_at = event.occurred_at
            case EventType.RUN_FAILED:
                out.status = RunStatus.DENIED if data.get("policy_denied") else RunStatus.FAILED
                out.completed, out.completed_at = True, event.occurred_at
            case EventType.RUN_CANCELLED:
                out.status, out.completed = RunStatus.CANCELLED, True
                out.completed_at = event.occurred_at
            case EventType.RUN_REPLAYED:
                out.replays += 1
                if "run_id" in data:
                    out.run_id = str(data["run_id"])
            case _:
                pass
    return out


class EffectOrigin(StrEnum):
    """Where an execution's effect came from, as its events tell it."""

    FRESH = "fresh"  # performed by an attempt of this execution
    RECONCILED = "reconciled"  # found at the provider, left by an earlier attempt
    OUTCOME_UNKNOWN = "outcome_unknown"  # could not be looked for: a person decides


def effect_origin(events: list[Event]) -> EffectOrigin | None:
    """The origin of the execution's effect (None: no effect recorded yet, or none at all).
    The last word wins: a reset run that reconciles an effect an earlier run created
    reports it reconciled."""
    origin: EffectOrigin | None = None
    for event in events:
        data = event.event_data
        if event.event_type == EventType.TOOL_COMPLETED:
            origin = EffectOrigin.RECONCILED if data.get("reconciled") else EffectOrigin.FRESH
        elif event.event_type == EventType.EFFECT_DEAD_LETTERED and (
            data.get("error_code") == OUTCOME_UNKNOWN
        ):
            origin = EffectOrigin.OUTCOME_UNKNOWN
    return origin
