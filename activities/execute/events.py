"""The events the execute steps append, built from their inputs: pure functions, no I/O.

Each builder returns drafts in the order they are chained (each caused by the one before);
``chained`` adds them to a step's ``Chain``. An event's ``name`` (None: its type) makes its
id, so a retried attempt names its events after the attempt.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from activities.evidence import Chain, signal_id, step_id
from schemas.capabilities import CapabilitySpec
from schemas.events import AggregateType, EventDraft, EventType
from schemas.records import OUTCOME_UNKNOWN, Decision, ExecutionStatus
from schemas.run import AdapterOutput, PolicyInput, PolicyOutcome, RecordInput

ADAPTER_STEP = "adapter"
# The adapter step is the run's second (after the policy check): the step index the events
# design gives every step event.
ADAPTER_STEP_INDEX = 1


@dataclass(frozen=True)
class Draft:
    """An event to append: type, aggregate, name (None: the type) and data."""

    event_type: EventType
    aggregate: AggregateType
    aggregate_id: str
    name: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    per_run: bool = True  # False: one per execution (``Chain.add``)


# The adapter step's events are this actor's, in whichever step's transaction they are written.
ADAPTER_ACTOR = "moat.adapter"


def chained(chain: Chain, drafts: Iterable[Draft]) -> list[EventDraft]:
    """The chain's drafts, with ``drafts`` added in order."""
    for d in drafts:
        chain.add(d.event_type, d.aggregate, d.aggregate_id, d.name, per_run=d.per_run, **d.data)
    return chain.drafts


def synthetic(is_synthetic: bool) -> dict[str, Any]:
    """A probe's run is tagged in its events; real runs' events stay as they were."""
    return {"is_synthetic": True} if is_synthetic else {}


def effect_id(receipt_id: str) -> str:
    """The adapter step's id: the aggregate of its step and effect events."""
    return step_id(receipt_id, ADAPTER_STEP)


# Intake: the request an execution answers, received once, taken up by each run.


def intake_events(inp: PolicyInput, resumed: bool) -> list[Draft]:
    """The execution's ``SIGNAL_RECEIVED`` (one per execution: a run resuming it writes
    the same event, which the log skips) and this run's ``SIGNAL_PROCESSING_STARTED``."""
    ref = inp.ref
    received: dict[str, Any] = {
        "workflow_id": ref.workflow_id,
        "capability_id": inp.capability.id,
        "capability_version": inp.capability.version,
        **synthetic(ref.is_synthetic),
    }
    if ref.submission is not None:
        received |= {
            "submitted_at": ref.submission.submitted_at.isoformat(),
            "request_id": ref.submission.request_id,
            "trace_id": ref.submission.trace_id,
        }
    signal = signal_id(ref.receipt_id)
    return [
        Draft(EventType.SIGNAL_RECEIVED, AggregateType.SIGNAL, signal, None, received, False),
        Draft(
            EventType.SIGNAL_PROCESSING_STARTED,
            AggregateType.SIGNAL,
            signal,
            data={"workflow_id": ref.workflow_id, "resumed": resumed},
        ),
    ]


# The policy step.


def policy_events(inp: PolicyInput, decision_id: str, outcome: PolicyOutcome) -> list[Draft]:
    """A checked run's start, the decision it got and, unless denied, the effect it asks for."""
    drafts = [
        Draft(
            EventType.RUN_STARTED,
            AggregateType.RUN,
            inp.ref.receipt_id,
            data={
                "workflow_id": inp.ref.workflow_id,
                "capability_id": inp.capability.id,
                "capability_version": inp.capability.version,
                "input_hash": inp.ref.input_hash,
                **synthetic(inp.ref.is_synthetic),
            },
        ),
        Draft(
            EventType.POLICY_EVALUATED,
            AggregateType.POLICY,
            decision_id,
            data={
                "mode": outcome.mode.value,
                "decision": outcome.decision.value,
                "rule_hit": outcome.rule_hit.value,
                "reason": outcome.reason,
                "policy_version": outcome.policy_version,
            },
        ),
    ]
    if outcome.decision != Decision.DENY:
        drafts.append(
            Draft(
                EventType.EFFECT_REQUESTED,
                AggregateType.EFFECT,
                effect_id(inp.ref.receipt_id),
                data={
                    "effect_type": inp.capability.effect_type.value,
                    "adapter_id": inp.capability.adapter_id,
                },
            )
        )
    return drafts


# The adapter step: one attempt's events.


def _step_fields(receipt_id: str, attempt: int) -> dict[str, Any]:
    return {
        "step": ADAPTER_STEP,
        "step_index": ADAPTER_STEP_INDEX,
        "effect_id": effect_id(receipt_id),
        "attempt": attempt,
        "retry_count": attempt - 1,
    }


def attempt_started(
    receipt_id: str, capability: CapabilitySpec, attempt: int, resumed: bool
) -> list[Draft]:
    """The step's start (or retry), then the tool call, before the provider is called."""
    sid = effect_id(receipt_id)
    if attempt == 1:
        first = Draft(
            EventType.STEP_STARTED,
            AggregateType.STEP,
            sid,
            data={"step": ADAPTER_STEP, "adapter_id": capability.adapter_id},
        )
    else:
        first = Draft(
            EventType.STEP_RETRIED,
            AggregateType.STEP,
            sid,
            f"STEP_RETRIED:{attempt}",
            {"step": ADAPTER_STEP, "attempt": attempt},
        )
    called = {
        "step": ADAPTER_STEP,
        "step_index": ADAPTER_STEP_INDEX,
        "effect_id": sid,
        "tool_name": capability.id,
        "attempt": attempt,
        "retry_count": attempt - 1,
        "resumed": resumed,
    }
    return [
        first,
        Draft(EventType.TOOL_CALLED, AggregateType.STEP, sid, f"TOOL_CALLED:{attempt}", called),
    ]


@dataclass(frozen=True)
class AttemptFailure:
    """What an attempt's failure says about itself and what follows it."""

    attempt: int
    duration_ms: int
    error_type: str | None
    error_code: Any
    http_status: Any
    retry_after: timedelta | None
    next_retry_at: datetime | None


def attempt_failed(receipt_id: str, failure: AttemptFailure) -> list[Draft]:
    """The failed tool call and, when Temporal will try again, the effect's retry."""
    sid = effect_id(receipt_id)
    attempt = failure.attempt
    failed = {
        **_step_fields(receipt_id, attempt),
        "duration_ms": failure.duration_ms,
        "error_code": failure.error_code,
        "http_status": failure.http_status,
        "next_retry_at": failure.next_retry_at.isoformat() if failure.next_retry_at else None,
    }
    drafts = [
        Draft(EventType.TOOL_FAILED, AggregateType.STEP, sid, f"TOOL_FAILED:{attempt}", failed)
    ]
    if failure.next_retry_at is not None:
        retrying = {
            "attempt": attempt,
            "error_code": failure.error_type,
            "http_status": failure.http_status,
            "retry_after_seconds": (
                failure.retry_after.total_seconds() if failure.retry_after else None
            ),
        }
        drafts.append(
            Draft(
                EventType.EFFECT_RETRYING,
                AggregateType.EFFECT,
                sid,
                f"EFFECT_RETRYING:{attempt}",
                retrying,
            )
        )
    return drafts


def attempt_completed(
    receipt_id: str, capability: CapabilitySpec, attempt: int, duration_ms: int, out: AdapterOutput
) -> list[Draft]:
    """What a reconcile look-up found (when one ran), then the completed tool call."""
    sid = effect_id(receipt_id)
    drafts: list[Draft] = []
    if out.reconciled is not None:
        found = {
            "effect_id": sid,
            "attempt": attempt,
            "found": out.reconciled,
            "strategy": capability.idempotency.value,
            "output_hash": out.output_hash,
        }
        drafts.append(
            Draft(
                EventType.EFFECT_RECONCILED,
                AggregateType.EFFECT,
                sid,
                f"EFFECT_RECONCILED:{attempt}",
                found,
            )
        )
    completed = {
        **_step_fields(receipt_id, attempt),
        "duration_ms": duration_ms,
        "http_status": out.http_status,
        "output_hash": out.output_hash,
        "reconciled": bool(out.reconciled),
    }
    drafts.append(
        Draft(
            EventType.TOOL_COMPLETED,
            AggregateType.STEP,
            sid,
            f"TOOL_COMPLETED:{attempt}",
            completed,
        )
    )
    return drafts


# The record step.


def outcome_events(inp: RecordInput) -> list[Draft]:
    """The adapter step's end (when it was called), then the run's."""
    drafts = _step_outcome(inp) if inp.adapter_called else []
    if inp.success:
        ended = {"receipt_status": inp.status, **synthetic(inp.ref.is_synthetic)}
        drafts.append(
            Draft(EventType.RUN_COMPLETED, AggregateType.RUN, inp.ref.receipt_id, data=ended)
        )
        drafts.append(_processed(inp))
        return drafts
    failed = {
        "receipt_status": inp.status,
        "error_code": inp.error_code,
        "policy_denied": inp.status == ExecutionStatus.POLICY_DENIED,
        **synthetic(inp.ref.is_synthetic),
    }
    drafts.append(Draft(EventType.RUN_FAILED, AggregateType.RUN, inp.ref.receipt_id, data=failed))
    drafts.append(_processed(inp))
    return drafts


def _processed(inp: RecordInput) -> Draft:
    """The intake's end: an outcome recorded (a success, a failure or a refusal alike).
    The request's labels are the receipt's and the ``SIGNAL_RECEIVED``'s, not repeated."""
    data = {"receipt_status": inp.status, "error_code": inp.error_code}
    return Draft(
        EventType.SIGNAL_PROCESSED, AggregateType.SIGNAL, signal_id(inp.ref.receipt_id), data=data
    )


def _step_outcome(inp: RecordInput) -> list[Draft]:
    sid = effect_id(inp.ref.receipt_id)
    outcome: dict[str, Any] = {
        "status": inp.status,
        "error_code": inp.error_code,
        "http_status": inp.http_status,
    }
    if inp.success:
        effect = {"output_hash": inp.output_hash, "http_status": inp.http_status}
        return [
            Draft(
                EventType.STEP_COMPLETED,
                AggregateType.STEP,
                sid,
                data={"step": ADAPTER_STEP, **outcome},
            ),
            Draft(EventType.EFFECT_COMPLETED, AggregateType.EFFECT, sid, data=effect),
        ]
    drafts = [
        Draft(
            EventType.STEP_FAILED, AggregateType.STEP, sid, data={"step": ADAPTER_STEP, **outcome}
        ),
        Draft(EventType.EFFECT_FAILED, AggregateType.EFFECT, sid, data=outcome),
    ]
    if inp.retry_exhausted or inp.error_code == OUTCOME_UNKNOWN:
        # Retries ran out, or the effect may have happened and could not be looked up:
        # either way a person decides what happens next.
        dead = {
            "error_code": inp.error_code,
            "max_retries": inp.capability.retry_settings.max_retries,
            "outcome_unknown": inp.error_code == OUTCOME_UNKNOWN,
        }
        drafts.append(Draft(EventType.EFFECT_DEAD_LETTERED, AggregateType.EFFECT, sid, data=dead))
    return drafts
