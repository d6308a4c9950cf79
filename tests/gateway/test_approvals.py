"""Approvals bound to the exact call: under a strict policy a capability whose rule requires
approval waits for a person inside its run. Approved: exactly one provider call; rejected,
expired, mismatched, stale or self-approved: none, and no budget used. A duplicate storm
attaches to the one approval; a killed worker or a reset of the approved run repeats
nothing and needs no second approval."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import SearchAttributeKey
from typer.testing import CliRunner

import worker as worker_module
from schemas.names import STATUS_ATTRIBUTE
from schemas.run import ExecuteResult
from starter.cli import app as cli
from store import budgets, tenancy
from store.models import ApprovalRow, OrchestrationEvent, PolicyDecisionRow
from tests.gateway.test_policy import ADMIN, bearer, new_key, put_policy
from tests.support.fakes import FakeProvider, Step
from tests.support.stack import Stack, StackFactory, run_answer, worker_env
from tests.workflows.test_crash import spawn_worker
from tests.workflows.test_replay import reset

WAIT_0 = {"Prefer": "wait=0"}


def strict(ttl: int = 3600, **rule: Any) -> dict[str, Any]:
    return {
        "mode": "strict",
        "rules": [
            {"capability": "http.*", "requires_approval": True, "approval_ttl_seconds": ttl} | rule
        ],
    }


async def setup(stack: Stack, provider: FakeProvider, path: str, ttl: int = 3600) -> str:
    writer = await new_key(stack, ["policy:write"])
    await put_policy(stack, writer, strict(ttl))
    await budgets_on(stack)
    return provider.script(path, Step(201, {"ok": True}))


async def budgets_on(stack: Stack) -> None:
    async with stack.sessions.begin() as s:
        await tenancy.set_tenant(s, stack.tenant_id)
        await budgets.set_budget(s, stack.tenant_id, "http.request", 10, "day")


def call(url: str) -> dict[str, Any]:
    return {"method": "POST", "url": url, "json": {"text": "hello", "api_token": "s3cret"}}


async def pending(stack: Stack, url: str, key: str) -> dict[str, Any]:
    answer = await stack.execute("http.request", call(url), key=key)
    assert answer.status_code == 202, answer.text
    envelope: dict[str, Any] = answer.json()
    assert envelope["status"] == "accepted" and envelope["approval"]["status"] == "pending"
    return envelope


async def decide(
    stack: Stack, key: str, approval: dict[str, Any], action: str = "approve", **changes: Any
) -> Any:
    body = {
        "input_hash": approval["input_hash"],
        "policy_version": approval["policy_version"],
        "comment": "looks right",
    } | changes
    return await stack.http.post(
        f"{stack.url}/v1/approvals/{approval['id']}/{action}", json=body, headers=bearer(key)
    )


async def finished(stack: Stack, envelope: dict[str, Any]) -> ExecuteResult:
    handle: WorkflowHandle[Any, ExecuteResult] = stack.client.get_workflow_handle(
        envelope["workflow_id"], result_type=ExecuteResult
    )
    return await run_answer(handle.result())


async def used(stack: Stack) -> int:
    async with stack.sessions.begin() as s:
        await tenancy.set_tenant(s, stack.tenant_id)
        state = await budgets.budget_state(s, stack.tenant_id, "http.request", datetime.now(UTC))
    assert state is not None
    return state.used


async def event_types(stack: Stack, receipt_id: str) -> list[str]:
    async with stack.sessions() as s:
        rows = await s.execute(
            select(OrchestrationEvent.event_type)
            .where(OrchestrationEvent.correlation_id == receipt_id)
            .order_by(OrchestrationEvent.sequence_number)
        )
    return list(rows.scalars())


async def test_approved_call_runs_once(stack: Stack, provider: FakeProvider) -> None:
    url = await setup(stack, provider, "/approve")
    first = await pending(stack, url, "apr-1")
    approval = first["approval"]
    assert approval["id"].startswith("apr_") and approval["capability_id"] == "http.request"
    assert approval["policy_version"] == 1
    handle = stack.client.get_workflow_handle(first["workflow_id"])
    status = SearchAttributeKey.for_keyword(STATUS_ATTRIBUTE)
    for _ in range(100):  # set by the run's next workflow task
        description = await handle.describe()
        if description.typed_search_attributes.get(status) == "awaiting_approval":
            break
        await asyncio.sleep(0.05)
    assert description.typed_search_attributes.get(status) == "awaiting_approval"
    assert "http.request" in (await description.static_summary() or "")

    # A duplicate storm while it waits: every request answers the same approval.
    storm = await asyncio.gather(
        *(stack.execute("http.request", call(url), key="apr-1") for _ in range(6))
    )
    assert {r.status_code for r in storm} == {202}
    assert {r.json()["approval"]["id"] for r in storm} == {approval["id"]}
    polled = await stack.http.get(
        f"{stack.url}/v1/executions/{first['receipt_id']}", headers=bearer(stack.api_key)
    )
    assert polled.status_code == 202 and polled.json()["approval"]["id"] == approval["id"]

    # Readable with its redacted input.
    shown = await stack.http.get(
        f"{stack.url}/v1/approvals/{approval['id']}", headers=bearer(stack.api_key)
    )
    assert shown.json()["input"]["json"] == {"text": "hello", "api_token": "[REDACTED]"}
    listed = await stack.http.get(
        f"{stack.url}/v1/approvals?status=pending", headers=bearer(stack.api_key)
    )
    assert [a["id"] for a in listed.json()["items"]] == [approval["id"]]

    approver = await new_key(stack, ["approvals:write"])
    # Only keys with approvals:write decide.
    refused = await decide(stack, stack.api_key, approval)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "scope_missing"
    # A different digest or policy version changes nothing.
    for change in ({"input_hash": "sha256:" + "1" * 64}, {"policy_version": 7}):
        mismatch = await decide(stack, approver, approval, **change)
        assert mismatch.status_code == 409, mismatch.text
        assert mismatch.json()["error"]["code"] == "approval_mismatch"
    approved = await decide(stack, approver, approval)
    assert approved.status_code == 200, approved.text
    record = approved.json()
    assert record["status"] == "approved" and record["approved_digest"] == approval["input_hash"]
    assert record["decided_by"].startswith("key:") and record["comment"] == "looks right"
    again = await decide(stack, approver, approval)
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "approval_not_pending"

    result = await finished(stack, first)
    assert result.receipt is not None and result.receipt.status == "success"
    assert len(provider.calls_to("/approve")) == 1
    assert await used(stack) == 1
    done = await stack.http.get(
        f"{stack.url}/v1/executions/{first['receipt_id']}", headers=bearer(stack.api_key)
    )
    assert done.status_code == 200 and done.json()["status"] == "executed"
    types = await event_types(stack, first["receipt_id"])
    assert types.index("APPROVAL_REQUESTED") < types.index("APPROVAL_GRANTED")
    assert types.index("APPROVAL_GRANTED") < types.index("EFFECT_COMPLETED")
    manifest = await stack.http.get(
        f"{stack.url}/v1/executions/{first['receipt_id']}/manifest",
        headers=bearer(stack.api_key),
    )
    approvals = manifest.json()["approvals"]
    assert [(a["approver"], a["approved_digest"]) for a in approvals] == [
        (record["decided_by"], approval["input_hash"])
    ]
    async with stack.sessions() as s:
        count = await s.scalar(
            select(func.count()).select_from(ApprovalRow).filter_by(tenant_id=stack.tenant_id)
        )
        decision = await s.get(PolicyDecisionRow, result.receipt.policy_decision_id)
    assert count == 1
    assert decision is not None
    assert (decision.rule_hit, decision.policy_version) == ("APPROVAL_REQUIRED", 1)

    # A reset of the approved run repeats no effect and asks for no second approval.
    await reset(stack, first["workflow_id"], description.run_id, "FirstWorkflowTask")
    assert len(provider.calls_to("/approve")) == 1
    async with stack.sessions() as s:
        count = await s.scalar(
            select(func.count()).select_from(ApprovalRow).filter_by(tenant_id=stack.tenant_id)
        )
    assert count == 1 and await used(stack) == 1


async def test_refusals_never_call_the_provider(stack: Stack, provider: FakeProvider) -> None:
    url = await setup(stack, provider, "/refused")
    approver = await new_key(stack, ["approvals:write"])

    # Rejected: 403 approval_rejected with a receipt.
    rejected = await pending(stack, url, "rej")
    answer = await decide(stack, approver, rejected["approval"], "reject")
    assert answer.status_code == 200 and answer.json()["status"] == "rejected"
    result = await finished(stack, rejected)
    assert result.receipt is not None and result.receipt.error_code == "approval_rejected"
    run = await stack.client.get_workflow_handle(rejected["workflow_id"]).describe()
    assert run.status == WorkflowExecutionStatus.FAILED  # a refused approval ends it failed
    replay = await stack.execute("http.request", call(url), key="rej")
    assert replay.status_code == 403 and replay.json()["error"]["code"] == "approval_rejected"
    assert "APPROVAL_REJECTED" in await event_types(stack, rejected["receipt_id"])

    # Self-approval: the key that made the call may not approve it.
    both = await new_key(stack, ["execute:*", "approvals:write"])
    mine = await stack.execute("http.request", call(url), key="self", api_key=both)
    assert mine.status_code == 202, mine.text
    selfish = await decide(stack, both, mine.json()["approval"])
    assert selfish.status_code == 403
    assert selfish.json()["error"]["code"] == "self_approval_forbidden"

    # Stale: the policy changed since the call; the old approval cannot be approved.
    stale = await pending(stack, url, "stale")
    writer = await new_key(stack, ["policy:write"])
    await put_policy(stack, writer, strict())
    refused = await decide(stack, approver, stale["approval"])
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "approval_stale"
    # The admin may decide any tenant's approval; reject to end both runs.
    for waiting in (mine.json(), stale):
        answer = await stack.http.post(
            f"{stack.url}/v1/admin/tenants/{stack.tenant_id}/approvals/"
            f"{waiting['approval']['id']}/reject",
            json={
                "input_hash": waiting["approval"]["input_hash"],
                "policy_version": waiting["approval"]["policy_version"],
            },
            headers=ADMIN,
        )
        assert answer.status_code == 200 and answer.json()["decided_by"] == "admin"
        await finished(stack, waiting)

    # A rule naming its approvers: a key with approvals:write but not named may not decide.
    await put_policy(stack, writer, strict(approvers=["key:someoneelse"]))
    named = await pending(stack, url, "named")
    refused = await decide(stack, approver, named["approval"])
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    await stack.http.post(
        f"{stack.url}/v1/admin/tenants/{stack.tenant_id}/approvals/"
        f"{named['approval']['id']}/reject",
        json={k: named["approval"][k] for k in ("input_hash", "policy_version")},
        headers=ADMIN,
    )
    await finished(stack, named)

    assert provider.calls_to("/refused") == []
    assert await used(stack) == 0


async def test_expired_approval_ends_the_run(stack: Stack, provider: FakeProvider) -> None:
    url = await setup(stack, provider, "/expired", ttl=1)
    waiting = await pending(stack, url, "exp")
    result = await finished(stack, waiting)
    assert result.receipt is not None and result.receipt.error_code == "approval_expired"
    approver = await new_key(stack, ["approvals:write"])
    late = await decide(stack, approver, waiting["approval"])
    assert late.status_code == 409 and late.json()["error"]["code"] == "approval_not_pending"
    answer = await stack.http.get(
        f"{stack.url}/v1/executions/{waiting['receipt_id']}", headers=bearer(stack.api_key)
    )
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "approval_expired"
    assert "APPROVAL_EXPIRED" in await event_types(stack, waiting["receipt_id"])
    assert provider.calls_to("/expired") == [] and await used(stack) == 0


async def test_worker_killed_while_waiting(
    make_stack: StackFactory, provider: FakeProvider
) -> None:
    async with make_stack(with_worker=False, http_allow_hosts=[provider.allow_entry]) as stack:
        env = worker_env(stack, provider)
        url = await setup(stack, provider, "/killed")
        first = spawn_worker(env)
        try:
            waiting = await pending(stack, url, "killed")
        finally:
            first.kill()
            first.wait(10)
        # The next worker (in this process: its start costs nothing) has only the history.
        async with (
            worker_module.activity_deps(stack.settings) as (sessions, http_out),
            worker_module.build_worker(stack.client, stack.settings, sessions, http_out),
        ):
            approver = await new_key(stack, ["approvals:write"])
            approved = await decide(stack, approver, waiting["approval"])
            assert approved.status_code == 200, approved.text
            result = await asyncio.wait_for(finished(stack, waiting), 60)
        assert result.receipt is not None and result.receipt.status == "success"
        assert len(provider.calls_to("/killed")) == 1


async def test_cli_walkthrough(
    stack: Stack, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The walk-through of docs/policy-and-approvals.md: set a strict policy, see the call
    pending, approve it."""
    monkeypatch.setenv("MOAT_GATEWAY_URL", stack.url)
    monkeypatch.setenv("COLUMNS", "200")
    runner = CliRunner()

    async def moat(*argv: str) -> str:
        result = await asyncio.to_thread(runner.invoke, cli, list(argv))
        assert result.exit_code == 0, result.output
        return result.output

    writer = await new_key(stack, ["policy:write"])
    document = tmp_path / "policy.json"
    document.write_text(json.dumps(strict()))
    assert "policy version 1 is in force" in await moat(
        "policy", "set", "--file", str(document), "--api-key", writer
    )
    url = provider.script("/cli", Step(201, {"ok": True}))
    waiting = await pending(stack, url, "cli")
    approval_id = waiting["approval"]["id"]
    listed = await moat("approvals", "list", "--status", "pending", "--api-key", stack.api_key)
    assert approval_id in listed
    shown = await moat("approvals", "show", approval_id, "--api-key", stack.api_key)
    assert "[REDACTED]" in shown and "s3cret" not in shown
    # The agent's key may not decide (no approvals:write); an approver's key may.
    mine = await asyncio.to_thread(
        runner.invoke,
        cli,
        ["approvals", "approve", approval_id, "--yes", "--api-key", stack.api_key],
    )
    assert mine.exit_code == 1 and "scope_missing" in mine.output
    approver = await new_key(stack, ["approvals:read", "approvals:write"])
    decided = await moat("approvals", "approve", approval_id, "--yes", "--api-key", approver)
    assert "approved by key:" in decided
    result = await finished(stack, waiting)
    assert result.receipt is not None and result.receipt.status == "success"
    assert "1" in await moat("policy", "history", "--api-key", stack.api_key)
