"""One identity: every input of ExecuteCapability and its steps names its execution with
one ``ExecutionRef``. Inputs recorded before it (the flat shape, in the histories of runs
still open) decode into it; the start's signed claims are the bytes signed before it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel

from schemas.approvals import ApprovalRequestInput
from schemas.capabilities import CapabilityCatalog
from schemas.identity import REF_FIELDS, ExecutionRef, Submission
from schemas.names import CALL_ADAPTER, CHECK_POLICY, RECORD_OUTCOME, REQUEST_APPROVAL
from schemas.run import AdapterInput, ExecuteWorkflowInput, PolicyInput, RecordInput
from schemas.settings import MoatSettings
from schemas.start import StartClaims
from starter.runtime.codec import data_converter
from store.keyrings.start import StartKeyring
from tests.histories.corpus import KEYRING, Recorded, corpus
from tests.support.stack import policy_input

# The activities' inputs, by activity name.
INPUTS: dict[str, type[BaseModel]] = {
    CHECK_POLICY: PolicyInput,
    CALL_ADAPTER: AdapterInput,
    RECORD_OUTCOME: RecordInput,
    REQUEST_APPROVAL: ApprovalRequestInput,
}
# What the flat shape of each input named of its execution (AdapterInput's own
# ``idempotency_key`` is the downstream one, not the execution's).
FLAT_REF: dict[type[BaseModel], tuple[str, ...]] = {
    ExecuteWorkflowInput: REF_FIELDS,
    PolicyInput: REF_FIELDS,
    RecordInput: REF_FIELDS,
    ApprovalRequestInput: REF_FIELDS,
    AdapterInput: ("tenant_id", "receipt_id", "connection_id"),
}


async def _payloads(recorded: Recorded) -> list[tuple[type[BaseModel], dict[str, Any], Any]]:
    """Every execution input a history carries: as recorded (JSON) and as decoded now."""
    converter = data_converter(MoatSettings(codec_keyring=KEYRING))
    found: list[tuple[type[BaseModel], dict[str, Any], Any]] = []
    for event in recorded.history.events:
        if event.HasField("workflow_execution_started_event_attributes"):
            if recorded.workflow_type != "ExecuteCapability":
                continue
            model: type[BaseModel] = ExecuteWorkflowInput
            payloads = event.workflow_execution_started_event_attributes.input.payloads
        elif event.HasField("activity_task_scheduled_event_attributes"):
            scheduled = event.activity_task_scheduled_event_attributes
            if scheduled.activity_type.name not in INPUTS:
                continue
            model = INPUTS[scheduled.activity_type.name]
            payloads = scheduled.input.payloads
        else:
            continue
        [raw] = await converter.decode(payloads, [dict])
        [decoded] = await converter.decode(payloads, [model])
        found.append((model, raw, decoded))
    return found


async def test_every_recorded_input_decodes_with_its_identity_in_the_ref() -> None:
    shapes: dict[type[BaseModel], set[str]] = {}
    for recorded in corpus():
        for model, raw, decoded in await _payloads(recorded):
            assert isinstance(decoded, model)
            ref = decoded.ref  # type: ignore[attr-defined]
            assert isinstance(ref, ExecutionRef)
            if model is ExecuteWorkflowInput:
                # A start's ref carries the start's own labels to its steps.
                assert ref.submission == Submission(
                    submitted_at=decoded.submitted_at,  # type: ignore[attr-defined]
                    request_id=raw["request_id"],
                    trace_id=raw["trace_id"],
                )
                ref = ref.model_copy(update={"submission": None})
            if "ref" in raw:
                shapes.setdefault(model, set()).add("nested")
                expected = ExecutionRef.model_validate(raw["ref"])
                if model is ExecuteWorkflowInput:  # its submission is checked above
                    expected = expected.model_copy(update={"submission": None})
                assert ref == expected
                continue
            shapes.setdefault(model, set()).add("flat")
            for name in FLAT_REF[model]:
                if name in raw:
                    assert getattr(ref, name) == raw[name], (recorded.name, model, name)
            if model is AdapterInput:
                assert decoded.idempotency_key == raw["idempotency_key"]  # type: ignore[attr-defined]
    # The corpus holds both shapes of every input a regular activity carries.
    for model in (ExecuteWorkflowInput, PolicyInput, RecordInput, AdapterInput):
        assert shapes.get(model) == {"flat", "nested"}, model.__name__


def _start(**ref: Any) -> ExecuteWorkflowInput:
    capability = CapabilityCatalog().get("demo.echo")
    assert capability is not None
    return ExecuteWorkflowInput(
        receipt_id="rcpt-1",
        tenant_id="ten_x",
        idempotency_key="k",
        input_hash="sha256:" + "0" * 64,
        capability=capability,
        input={"n": 1},
        request_id="req",
        trace_id="0" * 32,
        submitted_at=datetime(2026, 1, 1, tzinfo=UTC),
        api_key_id="key-mine",
        scopes=["execute:*"],
        **ref,
    )


# v3 signatures made with the flat claims (key b"0" * 32 as "k") of `_start(**ref)`.
SIGNED_FLAT = [
    ({}, "v3.k.WTbHTSN0OxLb10cYY3U8LE5Acox6QfPD-UnG73CQDTw"),
    (
        {"is_synthetic": True, "connection_id": "conn-1"},
        "v3.k.jpbPDDyLCII64AsiKlTwjDU99j1wXEUM_FH8J5aazcY",
    ),
]


@pytest.mark.parametrize(("ref", "signature"), SIGNED_FLAT, ids=["plain", "probe-connection"])
def test_a_start_signed_with_the_flat_claims_still_verifies(
    ref: dict[str, Any], signature: str
) -> None:
    ring = StartKeyring({"k": b"0" * 32}, "k")
    start = _start(**ref)
    assert ring.sign(StartClaims.of_start(start, "wf")) == signature
    signed = start.model_copy(update={"start_signature": signature})
    inp = policy_input(signed)
    inp = inp.model_copy(update={"ref": inp.ref.model_copy(update=ref)})
    assert ring.refusal(StartClaims.of_policy(inp), signature) is None
    # The run id is no claim: a reset run's policy step checks the same start.
    reset = inp.model_copy(update={"ref": inp.ref.model_copy(update={"run_id": "another"})})
    assert ring.refusal(StartClaims.of_policy(reset), signature) is None
    swapped = inp.model_copy(update={"ref": inp.ref.model_copy(update={"tenant_id": "ten_y"})})
    assert ring.refusal(StartClaims.of_policy(swapped), signature) == "mismatch"


def test_claims_named_field_by_field_are_the_claims_signed() -> None:
    claims = StartClaims.of_start(_start(), "wf")
    flat = StartClaims.model_validate(claims.claims())
    assert flat == claims
    assert flat.message() == claims.message()


def test_a_flat_input_and_its_nested_form_are_one_input() -> None:
    start = _start(connection_id="conn-1")
    assert start.ref == ExecutionRef(
        tenant_id="ten_x",
        receipt_id="rcpt-1",
        idempotency_key="k",
        input_hash="sha256:" + "0" * 64,
        connection_id="conn-1",
        submission=Submission(
            submitted_at=datetime(2026, 1, 1, tzinfo=UTC), request_id="req", trace_id="0" * 32
        ),
    )
    assert ExecuteWorkflowInput.model_validate(start.model_dump(mode="json")) == start
    adapter = AdapterInput.model_validate(
        {"tenant_id": "t", "receipt_id": "r", "capability": start.capability, "input": {}}
        | {"idempotency_key": "moat-downstream", "trace_id": "0" * 32}
    )
    assert adapter.ref == ExecutionRef(tenant_id="t", receipt_id="r")
    assert adapter.idempotency_key == "moat-downstream"


def test_an_approval_request_of_the_flat_shape_names_its_execution_in_the_ref() -> None:
    flat = {
        "tenant_id": "t",
        "receipt_id": "r",
        "workflow_id": "exec/t/x",
        "run_id": "run-1",
        "capability_id": "demo.echo",
        "capability_version": "1.0.0",
        "input_hash": "sha256:ab",
        "policy_version": 2,
        "requested_by": "key:k1",
        "ttl_seconds": 60,
        "input": {"n": 1},
    }
    request = ApprovalRequestInput.model_validate(flat)
    assert request.ref == ExecutionRef(
        tenant_id="t",
        receipt_id="r",
        workflow_id="exec/t/x",
        run_id="run-1",
        input_hash="sha256:ab",
    )
    assert (request.capability_id, request.policy_version) == ("demo.echo", 2)
