"""The execute steps' events, built from their inputs alone (no database, no Temporal)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from activities.evidence import Chain
from activities.execute.events import (
    ADAPTER_STEP,
    AttemptFailure,
    attempt_completed,
    attempt_failed,
    attempt_started,
    chained,
    intake_events,
    outcome_events,
    policy_events,
)
from schemas.capabilities import CapabilitySpec, EffectType, RetrySettings
from schemas.events import AggregateType, EventType, event_id
from schemas.identity import Submission
from schemas.records import OUTCOME_UNKNOWN, Decision, ExecutionStatus, PolicyMode, RuleHit
from schemas.run import (
    AdapterOutput,
    ExecuteWorkflowInput,
    PolicyInput,
    PolicyOutcome,
    RecordInput,
)

CAP = CapabilitySpec(
    id="demo.echo",
    version="1.0.0",
    adapter="echo",
    adapter_id="echo-v1",
    effect_type=EffectType.API_CALL,
    retry=RetrySettings(max_retries=2, base_delay_seconds=0.1),
)
RECEIPT = "0190c0de-0000-7000-8000-000000000001"
EFFECT = f"{RECEIPT}:{ADAPTER_STEP}"
SIGNAL = f"{RECEIPT}:signal"
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _policy_input(*, is_synthetic: bool = False) -> PolicyInput:
    return PolicyInput(
        receipt_id=RECEIPT,
        tenant_id="t-1",
        idempotency_key="k-1",
        input_hash="sha256:ab",
        capability=CAP,
        workflow_id="exec/t-1/x",
        run_id="run-1",
        idempotency_ttl_seconds=60,
        is_synthetic=is_synthetic,
    )


def _decided(decision: Decision) -> PolicyOutcome:
    return PolicyOutcome(
        policy_decision_id="d-1",
        decision=decision,
        rule_hit=RuleHit.ALLOWED if decision == Decision.ALLOW else RuleHit.SCOPE_MISSING,
        mode=PolicyMode.STANDARD,
        reason="why",
        policy_version=3,
    )


def _record(**update: object) -> RecordInput:
    base = RecordInput(
        receipt_id=RECEIPT,
        tenant_id="t-1",
        idempotency_key="k-1",
        input_hash="sha256:ab",
        capability=CAP,
        request_id="req-1",
        trace_id="tr-1",
        submitted_at=NOW,
        workflow_id="exec/t-1/x",
        run_id="run-1",
        policy_decision_id="d-1",
        success=False,
        status=ExecutionStatus.FAILURE,
        adapter_called=True,
    )
    return base.model_copy(update=update)


def _types(drafts: list) -> list[EventType]:  # type: ignore[type-arg]
    return [d.event_type for d in drafts]


def test_an_allowed_check_starts_the_run_and_requests_the_effect() -> None:
    drafts = policy_events(_policy_input(), "d-1", _decided(Decision.ALLOW))
    assert _types(drafts) == [
        EventType.RUN_STARTED,
        EventType.POLICY_EVALUATED,
        EventType.EFFECT_REQUESTED,
    ]
    assert drafts[1].aggregate_id == "d-1"
    assert drafts[1].data["policy_version"] == 3
    assert drafts[2].aggregate_id == EFFECT
    assert "is_synthetic" not in drafts[0].data


def test_a_denied_check_requests_no_effect_and_a_probe_is_tagged() -> None:
    drafts = policy_events(_policy_input(is_synthetic=True), "d-1", _decided(Decision.DENY))
    assert _types(drafts) == [EventType.RUN_STARTED, EventType.POLICY_EVALUATED]
    assert drafts[0].data["is_synthetic"] is True


def test_a_first_attempt_starts_the_step_and_a_retry_is_named_by_its_attempt() -> None:
    first = attempt_started(RECEIPT, CAP, 1, resumed=False)
    assert _types(first) == [EventType.STEP_STARTED, EventType.TOOL_CALLED]
    assert [d.name for d in first] == [None, "TOOL_CALLED:1"]
    again = attempt_started(RECEIPT, CAP, 3, resumed=True)
    assert _types(again) == [EventType.STEP_RETRIED, EventType.TOOL_CALLED]
    assert [d.name for d in again] == ["STEP_RETRIED:3", "TOOL_CALLED:3"]
    assert again[1].data["retry_count"] == 2
    assert again[1].data["resumed"] is True


def test_a_failure_announces_its_retry_only_when_there_is_one() -> None:
    failure = AttemptFailure(
        attempt=2,
        duration_ms=15,
        error_type="provider_rate_limited",
        error_code="provider_rate_limited",
        http_status=429,
        retry_after=timedelta(seconds=7),
        next_retry_at=NOW,
    )
    retried = attempt_failed(RECEIPT, failure)
    assert _types(retried) == [EventType.TOOL_FAILED, EventType.EFFECT_RETRYING]
    assert retried[0].data["next_retry_at"] == NOW.isoformat()
    assert retried[1].data["retry_after_seconds"] == 7.0
    final = attempt_failed(RECEIPT, AttemptFailure(**{**failure.__dict__, "next_retry_at": None}))
    assert _types(final) == [EventType.TOOL_FAILED]
    assert final[0].data["next_retry_at"] is None


def test_a_reconciled_attempt_says_what_the_look_up_found() -> None:
    out = AdapterOutput(http_status=200, output_hash="sha256:cd", reconciled=True)
    drafts = attempt_completed(RECEIPT, CAP, 2, 40, out)
    assert _types(drafts) == [EventType.EFFECT_RECONCILED, EventType.TOOL_COMPLETED]
    assert drafts[1].data["reconciled"] is True
    plain = attempt_completed(RECEIPT, CAP, 1, 40, out.model_copy(update={"reconciled": None}))
    assert _types(plain) == [EventType.TOOL_COMPLETED]


def test_outcomes_end_the_step_then_the_run() -> None:
    assert _types(outcome_events(_record(success=True, status="success"))) == [
        EventType.STEP_COMPLETED,
        EventType.EFFECT_COMPLETED,
        EventType.RUN_COMPLETED,
        EventType.SIGNAL_PROCESSED,
    ]
    assert _types(outcome_events(_record())) == [
        EventType.STEP_FAILED,
        EventType.EFFECT_FAILED,
        EventType.RUN_FAILED,
        EventType.SIGNAL_PROCESSED,
    ]
    unknown = outcome_events(_record(error_code=OUTCOME_UNKNOWN))
    assert EventType.EFFECT_DEAD_LETTERED in _types(unknown)
    denied = outcome_events(_record(adapter_called=False, status=ExecutionStatus.POLICY_DENIED))
    assert _types(denied) == [EventType.RUN_FAILED, EventType.SIGNAL_PROCESSED]
    assert denied[0].data["policy_denied"] is True
    assert denied[1].aggregate == AggregateType.SIGNAL and denied[1].aggregate_id == SIGNAL
    assert denied[1].data["receipt_status"] == ExecutionStatus.POLICY_DENIED
    assert denied[1].data["error_code"] is None


def test_intake_is_received_once_per_execution_and_started_by_each_run() -> None:
    inp = _policy_input()
    submission = Submission(submitted_at=NOW, request_id="req-1", trace_id="tr-1")
    inp = inp.model_copy(update={"ref": inp.ref.model_copy(update={"submission": submission})})
    drafts = chained(Chain("t-1", RECEIPT, "run-1", "moat.policy"), intake_events(inp, False))
    assert _types(drafts) == [EventType.SIGNAL_RECEIVED, EventType.SIGNAL_PROCESSING_STARTED]
    received, started = drafts
    assert {received.aggregate_type, started.aggregate_type} == {AggregateType.SIGNAL}
    assert received.aggregate_id == started.aggregate_id == SIGNAL
    assert received.causation_id is None and started.causation_id == received.id
    assert received.event_data["submitted_at"] == NOW.isoformat()
    assert (received.event_data["request_id"], received.event_data["trace_id"]) == (
        "req-1",
        "tr-1",
    )
    assert received.event_data["capability_id"] == CAP.id
    # Another run of the execution (a resumed one) writes the same SIGNAL_RECEIVED (the log
    # skips it) and a SIGNAL_PROCESSING_STARTED of its own.
    again = chained(Chain("t-1", RECEIPT, "run-2", "moat.policy"), intake_events(inp, True))
    assert again[0].id == received.id == event_id(RECEIPT, "", "SIGNAL_RECEIVED")
    assert again[1].id != started.id and again[1].causation_id == received.id
    assert again[1].event_data["resumed"] is True


def test_a_ref_without_submission_is_received_without_its_labels() -> None:
    [received, _] = intake_events(_policy_input(), False)
    assert "request_id" not in received.data and received.data["workflow_id"] == "exec/t-1/x"


def test_a_workflow_input_carries_its_own_labels_in_its_ref() -> None:
    record = _record()
    start = ExecuteWorkflowInput(
        ref=record.ref,
        capability=CAP,
        input={},
        request_id="req-2",
        trace_id="tr-2",
        submitted_at=NOW,
    )
    assert start.ref.submission == Submission(submitted_at=NOW, request_id="req-2", trace_id="tr-2")
    # A copy for another request (a requeue) names that one once it is read again.
    copied = start.model_copy(update={"request_id": "req-3"})
    again = ExecuteWorkflowInput.model_validate(copied.model_dump(mode="json"))
    assert again.ref.submission is not None and again.ref.submission.request_id == "req-3"


def test_chained_events_are_caused_each_by_the_one_before() -> None:
    chain = Chain("t-1", RECEIPT, "run-1", "moat.adapter", cause="e-0")
    drafts = chained(chain, attempt_started(RECEIPT, CAP, 2, resumed=False))
    assert [d.id for d in drafts] == [
        event_id(RECEIPT, "run-1", "STEP_RETRIED:2"),
        event_id(RECEIPT, "run-1", "TOOL_CALLED:2"),
    ]
    assert [d.causation_id for d in drafts] == ["e-0", drafts[0].id]
