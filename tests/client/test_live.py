"""The client against a live gateway and worker: execute, idempotent replay, refusals as
``MoatError`` with the stable code, downstream failures as results, polling, a call held
for a person's approval, receipts, capabilities, and the blocking client."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime

import pytest
from moat_client import (
    ApprovalRequired,
    AsyncMoatClient,
    EnvelopeStatus,
    HostNotAllowed,
    IdempotencyKeyReused,
    MoatClient,
    MoatError,
    NotFound,
    PolicyDenied,
    Unauthenticated,
)

from tests.gateway.test_policy import bearer, new_key, put_policy
from tests.support.fakes import FakeProvider, Step
from tests.support.stack import Stack

STRICT = {"mode": "strict", "rules": [{"capability": "http.*", "requires_approval": True}]}


async def test_execute_replay_and_read_back(stack: Stack) -> None:
    async with AsyncMoatClient(stack.url, stack.api_key) as moat:
        first = await moat.execute("demo.echo", {"hello": "client"}, idempotency_key="client-1")
        assert first.http_status == 200 and first.ok and not first.replayed
        assert first.status == EnvelopeStatus.EXECUTED
        assert first.receipt is not None and first.receipt_id == first.receipt.id
        assert first.receipt.idempotency_key == "client-1" and first.error is None

        again = await moat.execute("demo.echo", {"hello": "client"}, idempotency_key="client-1")
        assert again.replayed and again.status == "executed"
        assert again.receipt_id == first.receipt_id and again.receipt == first.receipt

        fetched = await moat.get_execution(first.receipt_id)
        assert fetched.status == "executed" and fetched.receipt == first.receipt
        assert await moat.get_receipt(first.receipt_id) == first.receipt

    # Read again and dumped, the envelope is what the gateway sent, field for field and in
    # order: `moat execute` prints it this way.
    raw = await stack.http.get(
        f"{stack.url}/v1/executions/{first.receipt_id}",
        headers={"Authorization": f"Bearer {stack.api_key}"},
    )
    dumped = json.loads(fetched.envelope.model_dump_json())
    assert dumped == raw.json() and list(dumped) == list(raw.json())


async def test_a_dry_run_is_the_plan_and_no_receipt(stack: Stack) -> None:
    async with AsyncMoatClient(stack.url, stack.api_key) as moat:
        planned = await moat.execute("demo.echo", {"dry": 1}, idempotency_key="dry", dry_run=True)
        assert planned.status == EnvelopeStatus.PLANNED and planned.receipt_id is None
        assert planned.envelope.plan is not None and planned.envelope.plan.decision == "allow"
        real = await moat.execute("demo.echo", {"dry": 1}, idempotency_key="dry")
        assert real.status == EnvelopeStatus.EXECUTED and not real.replayed


async def test_refusals_raise_moat_error_with_the_stable_code(stack: Stack) -> None:
    async with AsyncMoatClient(stack.url, stack.api_key) as moat:
        first = await moat.execute("demo.echo", {"n": 1}, idempotency_key="reused")
        with pytest.raises(MoatError) as reused:
            await moat.execute("demo.echo", {"n": 2}, idempotency_key="reused")
        assert reused.value.http_status == 422 and reused.value.code == "idempotency_key_reused"
        assert isinstance(reused.value, IdempotencyKeyReused)
        assert reused.value.original_receipt_id == first.receipt_id
        assert reused.value.details["original_receipt_id"] == first.receipt_id
        assert reused.value.trace_id and reused.value.message

        with pytest.raises(MoatError) as missing:
            await moat.execute("no.such.capability", {})
        assert missing.value.http_status == 404 and missing.value.code == "capability_not_found"
        assert isinstance(missing.value, NotFound)

        with pytest.raises(MoatError) as unknown:
            await moat.get_receipt("00000000-0000-7000-8000-000000000000")
        assert unknown.value.code == "receipt_not_found"

        with pytest.raises(ValueError, match="timezone-aware"):
            await moat.list_receipts(since=datetime.now(UTC).replace(tzinfo=None))

    async with AsyncMoatClient(stack.url, "moat_nobody_nothing") as stranger:
        with pytest.raises(MoatError) as unauthenticated:
            await stranger.execute("demo.echo", {"n": 1})
        assert unauthenticated.value.http_status == 401
        assert unauthenticated.value.code == "unauthenticated"
        assert isinstance(unauthenticated.value, Unauthenticated)


async def test_a_policy_refusal_is_raised_with_its_receipt(stack: Stack) -> None:
    async with AsyncMoatClient(stack.url, stack.api_key) as moat:
        with pytest.raises(HostNotAllowed) as refused:
            await moat.execute("http.request", {"method": "GET", "url": "http://10.0.0.1/x"})
    assert isinstance(refused.value, PolicyDenied) and refused.value.http_status == 403
    assert refused.value.code == "host_not_allowed"
    envelope = refused.value.envelope
    assert envelope is not None and envelope.status == "failed"
    assert envelope.receipt is not None and envelope.receipt.status != "success"
    assert refused.value.receipt_id == envelope.receipt_id


async def test_a_call_held_for_approval_is_raised_and_then_waited_for(
    stack: Stack, provider: FakeProvider
) -> None:
    await put_policy(stack, await new_key(stack, ["policy:write"]), STRICT)
    url = provider.script("/client-held", Step(201, {"ok": True}))
    call = {"method": "POST", "url": url, "json": {"n": 1}}
    async with AsyncMoatClient(stack.url, stack.api_key) as moat:
        with pytest.raises(ApprovalRequired) as held:
            await moat.execute("http.request", call, idempotency_key="held-1")
        approval = held.value.approval
        assert approval is not None and approval.status == "pending"
        assert approval.id.startswith("apr_") and approval.capability_id == "http.request"
        assert held.value.code == "approval_required" and held.value.receipt_id
        # What the client carries is what an approver is shown and must give back.
        shown = await stack.http.get(
            f"{stack.url}/v1/approvals/{approval.id}", headers=bearer(stack.api_key)
        )
        assert (approval.input_hash, approval.policy_version) == (
            shown.json()["input_hash"],
            shown.json()["policy_version"],
        )

        # Sent again with the key: the same approval, nothing run.
        with pytest.raises(ApprovalRequired) as again:
            await moat.execute("http.request", call, idempotency_key="held-1")
        assert again.value.approval is not None and again.value.approval.id == approval.id
        pending = await moat.get_execution(held.value.receipt_id)
        assert pending.status == "accepted" and pending.approval == approval
        assert provider.effects_on("/client-held") == []

        approver = await new_key(stack, ["approvals:write"])
        decided = await stack.http.post(
            f"{stack.url}/v1/approvals/{approval.id}/approve",
            json={"input_hash": approval.input_hash, "policy_version": approval.policy_version},
            headers=bearer(approver),
        )
        assert decided.status_code == 200, decided.text

        done = await moat.wait(held.value.receipt_id, interval=0.1)
        assert done.ok and done.receipt_id == held.value.receipt_id
        assert done.output["status"] == 201
        replayed = await moat.execute("http.request", call, idempotency_key="held-1")
        assert replayed.ok and replayed.receipt_id == done.receipt_id
    assert len(provider.effects_on("/client-held")) == 1


async def test_list_and_iter_receipts(stack: Stack) -> None:
    async with AsyncMoatClient(stack.url, stack.api_key) as moat:
        made = []
        for i in range(3):
            result = await moat.execute("demo.echo", {"i": i}, idempotency_key=f"list-{i}")
            assert result.receipt is not None
            made.append(result.receipt)
        newest_first = [r.id for r in reversed(made)]

        page = await moat.list_receipts(limit=2)
        assert [r.id for r in page.items] == newest_first[:2] and page.next_cursor
        rest = await moat.list_receipts(limit=2, cursor=page.next_cursor)
        assert [r.id for r in rest.items] == newest_first[2:] and rest.next_cursor is None
        assert [r.id async for r in moat.iter_receipts(limit=1)] == newest_first

        keyed = await moat.list_receipts(idempotency_key="list-1")
        assert [r.id for r in keyed.items] == [made[1].id]
        since = await moat.list_receipts(since=made[1].timestamp, capability_id="demo.echo")
        assert [r.id for r in since.items] == newest_first[:2]
        assert (await moat.list_receipts(status="timeout")).items == []


async def test_the_blocking_client(stack: Stack) -> None:
    """The blocking client blocks: it runs here in a thread of its own."""

    def use() -> tuple[str, str, list[str]]:
        with MoatClient(stack.url, stack.api_key) as moat:
            result = moat.execute("demo.echo", {"sync": True}, idempotency_key="sync-1")
            assert result.receipt_id is not None
            fetched = moat.get_execution(result.receipt_id)
            page = moat.list_receipts(idempotency_key="sync-1")
            return result.status, fetched.status, [r.id for r in page.items]

    executed, fetched, listed = await asyncio.to_thread(use)
    assert executed == fetched == "executed" and len(listed) == 1


async def test_capabilities(stack: Stack) -> None:
    async with AsyncMoatClient(stack.url, stack.api_key) as client:
        caps = {c.id: c for c in await client.capabilities()}
    http_request = caps["http.request"]
    assert http_request.retry.max_retries == 5
    assert "url" in http_request.input_schema["properties"]
    assert http_request.idempotency in {"provider_key", "reconcile", "natural", "none"}
    assert "http_bearer" in http_request.connection_types
    assert http_request.probe is not None and "method" in http_request.probe.allowed_values


async def test_a_first_run_longer_than_the_timeout_is_not_a_replay(
    stack: Stack, provider: FakeProvider
) -> None:
    """The run outlasts the client's timeout: the client asks for a wait that ends before
    it stops reading, polls the accepted run, and never sends the request again to attach
    to it. The first answer is not a replay; a call after the receipt exists is."""
    path = f"/slow-first/{uuid.uuid4().hex}"
    url = provider.script(path, Step(delay=3.0))
    request = {"method": "POST", "url": url, "json": {"n": 1}}
    async with AsyncMoatClient(stack.url, stack.api_key, timeout=2.0) as moat:
        first = await moat.execute("http.request", request, idempotency_key="slow-async")
        assert first.ok and not first.replayed and not first.envelope.replayed
        again = await moat.execute("http.request", request, idempotency_key="slow-async")
        assert again.replayed and again.envelope.replayed
        assert again.receipt_id == first.receipt_id

    def blocking() -> tuple[bool, bool]:
        with MoatClient(stack.url, stack.api_key, timeout=2.0) as moat:
            first = moat.execute("http.request", request, idempotency_key="slow-sync")
            again = moat.execute("http.request", request, idempotency_key="slow-sync")
            return first.replayed, again.replayed

    assert await asyncio.to_thread(blocking) == (False, True)
    assert len(provider.calls_to(path)) == 2
