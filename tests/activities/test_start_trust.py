"""The worker trusts only what Moat's gateway vouched for: a start that did not come through
the gateway (plaintext, or not signed for what it names) runs nothing, writes no receipt and
takes no idempotency key, whoever it names."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from temporalio.api.enums.v1 import EventType as HistoryEventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError

import worker as worker_module
from schemas.capabilities import CapabilityCatalog
from schemas.ids import uuid7
from schemas.names import EXECUTE_WORKFLOW
from schemas.redaction import redacted_hash
from schemas.run import ExecuteResult, ExecuteWorkflowInput, workflow_id_for
from schemas.start import START_NOT_SIGNED, StartClaims
from starter.runtime.codec import PLAINTEXT_REFUSED
from store.keyrings.start import StartKeyring
from store.models import IdempotencyClaim, OrchestrationEvent, PolicyDecisionRow, ReceiptRow
from tests.support.fakes import FakeProvider
from tests.support.stack import Stack, StackFactory, policy_input

# A refused run ends within seconds; bounded all the same.
RESULT_WAIT = 60


def keyring(stack: Stack) -> StartKeyring:
    """The gateway's and worker's start keyring."""
    return StartKeyring.from_settings(stack.settings)


def _hashed(payload: dict[str, Any]) -> dict[str, Any]:
    """What the gateway hashes into ``input_hash`` (http.request, no version or connection)."""
    return {
        "capability_id": "http.request",
        "capability_version": None,
        "connection_id": None,
        "input": payload,
    }


def forged_input(tenant_id: str, url: str, key: str = "k") -> ExecuteWorkflowInput:
    """What the gateway would have built for this tenant: every field valid-looking."""
    capability = CapabilityCatalog().get("http.request")
    assert capability is not None
    payload: dict[str, Any] = {
        "method": "POST",
        "url": url,
        "headers": {"Authorization": "Bearer the-tenants-own-token-1234567890"},
        "json": {"pay": 100},
    }
    return ExecuteWorkflowInput(
        receipt_id=str(uuid7()),
        tenant_id=tenant_id,
        idempotency_key=key,
        input_hash=redacted_hash(_hashed(payload)),
        capability=capability,
        input=payload,
        request_id=str(uuid7()),
        trace_id="0" * 32,
        submitted_at=datetime.now(UTC),
    )


async def start(
    client: Client, stack: Stack, arg: ExecuteWorkflowInput
) -> WorkflowHandle[Any, ExecuteResult]:
    return await client.start_workflow(
        EXECUTE_WORKFLOW,
        arg,
        id=workflow_id_for(arg.ref.tenant_id, arg.ref.idempotency_key),
        task_queue=stack.settings.task_queue,
        result_type=ExecuteResult,
    )


async def assert_nothing_happened(
    stack: Stack, provider: FakeProvider, path: str, tenant_id: str, key: str
) -> None:
    assert provider.calls_to(path) == []
    async with stack.sessions() as s:
        counts = [
            await s.scalar(select(func.count()).select_from(table).filter_by(tenant_id=tenant_id))
            for table in (ReceiptRow, IdempotencyClaim, PolicyDecisionRow)
        ]
    assert counts == [0, 0, 0]  # no receipt, no key taken, no policy decision


def refusal_of(err: WorkflowFailureError) -> ApplicationError:
    """The application error that failed the run (directly, or as an activity's cause)."""
    cause: BaseException | None = err.cause
    while cause is not None and not isinstance(cause, ApplicationError):
        cause = cause.__cause__
    assert isinstance(cause, ApplicationError), err
    return cause


async def refused_events(stack: Stack, tenant_id: str) -> list[OrchestrationEvent]:
    async with stack.sessions() as s:
        return list(
            (
                await s.execute(
                    select(OrchestrationEvent)
                    .filter_by(tenant_id=tenant_id)
                    .order_by(OrchestrationEvent.sequence_number)
                )
            )
            .scalars()
            .all()
        )


async def test_a_plaintext_start_is_refused_by_the_worker(
    stack: Stack, provider: FakeProvider
) -> None:
    url = provider.script("/plaintext")
    arg = forged_input(stack.tenant_id, url, "forged-plaintext")
    # Even validly signed: what did not come through the codec is not read at all.
    arg = keyring(stack).signed(arg, workflow_id_for(arg.ref.tenant_id, arg.ref.idempotency_key))
    # Someone with access to the namespace but not to Moat's codec keyring.
    plain = Client(
        stack.client.service_client,
        namespace=stack.settings.temporal_namespace,
        data_converter=pydantic_data_converter,
    )
    handle = await start(plain, stack, arg)
    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(handle.result(), RESULT_WAIT)
    assert isinstance(failed.value.cause, ApplicationError)
    assert failed.value.cause.type == PLAINTEXT_REFUSED
    history = await handle.fetch_history()
    types = [e.event_type for e in history.events]
    assert types[-1] == HistoryEventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED
    assert HistoryEventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED not in types
    assert HistoryEventType.EVENT_TYPE_MARKER_RECORDED not in types  # no local activity ran
    await assert_nothing_happened(
        stack, provider, "/plaintext", stack.tenant_id, arg.ref.idempotency_key
    )


async def test_an_unsigned_start_through_the_codec_is_refused(
    stack: Stack, provider: FakeProvider
) -> None:
    # Someone holding the codec keyring (or the admin key's /codec/encode) but not the
    # start keyring: the payloads are encrypted, the start is not signed.
    url = provider.script("/unsigned")
    arg = forged_input(stack.tenant_id, url, "forged-unsigned")
    handle = await start(stack.client, stack, arg)
    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(handle.result(), RESULT_WAIT)
    cause = refusal_of(failed.value)
    assert (cause.type, cause.non_retryable) == (START_NOT_SIGNED, True)
    assert cause.details == ({"reason": "unsigned"},)
    types = [e.event_type for e in (await handle.fetch_history()).events]
    assert types[-1] == HistoryEventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED
    assert HistoryEventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED not in types  # no adapter
    await assert_nothing_happened(
        stack, provider, "/unsigned", stack.tenant_id, arg.ref.idempotency_key
    )
    # The attempt is on record for the tenant it named, apart from any real execution.
    events = await refused_events(stack, stack.tenant_id)
    refused = f"refused:{handle.result_run_id}"
    assert [(e.event_type, e.correlation_id) for e in events] == [
        ("RUN_FAILED", refused),
        ("SIGNAL_PROCESSING_FAILED", refused),
    ]
    assert events[0].event_data["error_code"] == START_NOT_SIGNED
    # Nothing was accepted, so nothing was received: the intake's end names the refusal.
    assert events[1].causation_id == events[0].id
    assert events[1].event_data["reason"] == "unsigned"
    assert events[0].event_data["claimed_receipt_id"] == arg.ref.receipt_id


def _swap_tenant(arg: ExecuteWorkflowInput, victim: str) -> ExecuteWorkflowInput:
    return arg.model_copy(update={"ref": arg.ref.model_copy(update={"tenant_id": victim})})


def _made_synthetic(arg: ExecuteWorkflowInput, victim: str) -> ExecuteWorkflowInput:
    # Synthetic probes skip budgets.
    return arg.model_copy(update={"ref": arg.ref.model_copy(update={"is_synthetic": True})})


def _swap_a_secret(arg: ExecuteWorkflowInput, victim: str) -> ExecuteWorkflowInput:
    headers = {"Authorization": "Bearer attacker-chosen-token-1234567890"}
    forged = arg.model_copy(update={"input": {**arg.input, "headers": headers}})
    # The redacted input hash cannot tell the two apart; the signature can.
    assert redacted_hash(_hashed(forged.input)) == arg.ref.input_hash
    return forged


def _swap_the_requester(arg: ExecuteWorkflowInput, victim: str) -> ExecuteWorkflowInput:
    # Naming an approver's key as the caller would let that approver approve the call.
    return arg.model_copy(update={"api_key_id": "key-of-an-approver"})


@pytest.mark.parametrize(
    "tamper",
    [_swap_tenant, _made_synthetic, _swap_a_secret, _swap_the_requester],
    ids=["tenant-swapped", "made-synthetic", "secret-swapped", "requester-swapped"],
)
async def test_a_signed_start_altered_is_refused(
    stack: Stack, provider: FakeProvider, tamper: Any
) -> None:
    url = provider.script("/altered")
    victim, _ = await stack.new_tenant()
    # Signed for the caller's own tenant, as the gateway would, then altered.
    own = forged_input(stack.tenant_id, url, "altered")
    signed = keyring(stack).signed(own, workflow_id_for(own.ref.tenant_id, own.ref.idempotency_key))
    forged = tamper(signed, victim)
    handle = await start(stack.client, stack, forged)
    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(handle.result(), RESULT_WAIT)
    cause = refusal_of(failed.value)
    assert cause.type == START_NOT_SIGNED
    assert cause.details == ({"reason": "mismatch"},)
    for tenant in (victim, stack.tenant_id):
        await assert_nothing_happened(stack, provider, "/altered", tenant, own.ref.idempotency_key)
    assert [e.event_type for e in await refused_events(stack, forged.ref.tenant_id)] == [
        "RUN_FAILED",
        "SIGNAL_PROCESSING_FAILED",
    ]


async def test_a_start_signed_with_a_key_outside_the_ring_is_refused(
    stack: Stack, provider: FakeProvider, tmp_path: Path
) -> None:
    url = provider.script("/other-key")
    other = StartKeyring.from_settings(stack.settings.model_copy(update={"home": tmp_path}))
    arg = forged_input(stack.tenant_id, url, "other-key")
    arg = other.signed(arg, workflow_id_for(arg.ref.tenant_id, arg.ref.idempotency_key))
    handle = await start(stack.client, stack, arg)
    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(handle.result(), RESULT_WAIT)
    cause = refusal_of(failed.value)
    assert cause.details == ({"reason": "unknown_key"},)
    await assert_nothing_happened(stack, provider, "/other-key", stack.tenant_id, "other-key")


async def test_a_signed_start_runs(stack: Stack, provider: FakeProvider) -> None:
    # The control: the same forged-looking input, signed as the gateway signs, executes.
    url = provider.script("/signed")
    arg = forged_input(stack.tenant_id, url, "signed")
    arg = keyring(stack).signed(arg, workflow_id_for(arg.ref.tenant_id, arg.ref.idempotency_key))
    handle = await start(stack.client, stack, arg)
    result = await asyncio.wait_for(handle.result(), RESULT_WAIT)
    assert result.receipt is not None and result.receipt.status.value == "success"
    assert len(provider.calls_to("/signed")) == 1


async def test_gateway_and_worker_with_different_start_keyrings_say_so(
    make_stack: StackFactory, tmp_path: Path
) -> None:
    async with make_stack(with_worker=False) as stack:
        # A worker deployed without the gateways' keyring (it made one of its own).
        other = stack.settings.model_copy(update={"home": tmp_path})
        async with (
            worker_module.activity_deps(other) as (sessions, http),
            worker_module.build_worker(stack.client, other, sessions, http),
        ):
            response = await stack.execute("demo.echo", {"n": 1}, key="keyrings-differ")
        assert response.status_code == 500, response.text
        error = response.json()["error"]
        assert error["code"] == "gateway_error"
        assert error["details"]["reason"] == START_NOT_SIGNED
        assert "MOAT_START_KEYRING" in error["message"]


def test_the_start_keyring_is_private_and_never_silently_replaced(tmp_path: Path) -> None:
    from schemas.settings import MoatSettings

    dev = MoatSettings(home=tmp_path / "home")
    first = StartKeyring.from_settings(dev)  # created on first use, when none is configured
    assert dev.start_keyring_path.stat().st_mode & 0o777 == 0o600
    again = StartKeyring.from_settings(dev)
    claims = StartClaims.of_start(forged_input("ten_x", "http://example.test/"), "wf")
    assert again.refusal(claims, first.sign(claims)) is None
    configured = MoatSettings(home=tmp_path / "home", start_keyring=tmp_path / "missing.json")
    with pytest.raises(FileNotFoundError, match="MOAT_START_KEYRING"):
        StartKeyring.from_settings(configured)


def test_the_requesting_key_is_signed_and_older_starts_still_verify() -> None:
    ring = StartKeyring({"k": b"0" * 32}, "k")
    mine = forged_input("ten_x", "http://example.test/").model_copy(
        update={"api_key_id": "key-mine", "scopes": ["execute:*"]}
    )

    def refusal(req: ExecuteWorkflowInput) -> str | None:
        inp = policy_input(req)
        return ring.refusal(StartClaims.of_policy(inp), inp.start_signature)

    signed = ring.signed(mine, "wf")
    assert signed.start_signature.startswith("v3.") and refusal(signed) is None
    for other in ("key-of-an-approver", ""):
        assert refusal(signed.model_copy(update={"api_key_id": other})) == "mismatch"
    # Moat's own runs (no key, no scopes) are signed as v3 too: no key can be added later.
    own = ring.signed(mine.model_copy(update={"api_key_id": "", "scopes": None}), "wf")
    assert own.start_signature.startswith("v3.") and refusal(own) is None
    assert refusal(own.model_copy(update={"api_key_id": "key-mine"})) == "mismatch"
    # Relabelled as an older version, which did not cover the key: the MAC no longer fits.
    _, _, rest = signed.start_signature.partition(".")
    for older, reason in (("v2", "mismatch"), ("v1", "malformed")):  # v1 has no scopes
        relabelled = signed.model_copy(update={"start_signature": f"{older}.{rest}"})
        assert refusal(relabelled) == reason

    # Starts signed before v3 (recorded, still resettable) verify as they were signed.
    def signed_as_before(req: ExecuteWorkflowInput) -> ExecuteWorkflowInput:
        claims = StartClaims.of_start(req, "wf").model_copy(update={"api_key_id": None})
        return req.model_copy(update={"start_signature": ring.sign(claims)})

    v2 = signed_as_before(mine)
    v1 = signed_as_before(mine.model_copy(update={"scopes": None}))
    assert (v2.start_signature[:3], v1.start_signature[:3]) == ("v2.", "v1.")
    assert refusal(v2) is None and refusal(v1) is None
    assert refusal(v2.model_copy(update={"scopes": ["*"]})) == "mismatch"


# Signatures made by the gateway before v3 (key b"0" * 32 as "k"), for `_signed_earlier()`.
SIGNED_EARLIER = {
    "v2": "v2.k.pTUCG88pPyPuP2ghe54A0bC6WSsqyUPXDVrtR5-bTck",
    "v1": "v1.k.8oF8qxUhHKPiS9OILbDNK1glfPooOJe9gBmDKgg7rWU",
}


def _signed_earlier(version: str) -> ExecuteWorkflowInput:
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
        scopes=["execute:*"] if version == "v2" else None,
        start_signature=SIGNED_EARLIER[version],
    )


@pytest.mark.parametrize("version", sorted(SIGNED_EARLIER))
def test_starts_signed_before_v3_still_verify(version: str) -> None:
    # The bytes signed then are the bytes checked now: those runs can still be reset.
    ring = StartKeyring({"k": b"0" * 32}, "k")
    inp = policy_input(_signed_earlier(version))
    assert ring.refusal(StartClaims.of_policy(inp), inp.start_signature) is None
