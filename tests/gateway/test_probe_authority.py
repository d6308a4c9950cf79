"""A probe carries the authority of the key that set it running, never more: creating one
needs ``probes:write`` and what executing its capability needs; its runs are signed with
that key's id and scopes, held by the policy step to them (and to approvals) like the
key's own calls, and denied once the key is revoked."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from temporalio.client import WorkflowExecutionStatus

from schemas.capabilities import CapabilityCatalog
from schemas.names import EXECUTE_WORKFLOW, PROBE_WORKFLOW
from schemas.run import ExecuteResult, workflow_id_for
from store import api_keys, tenancy
from store.keyrings.start import StartKeyring
from store.models import ApprovalRow, PolicyDecisionRow, ReceiptRow
from tests.gateway.test_policy import ADMIN, bearer, new_key, put_policy
from tests.support.fakes import FakeProvider, Step
from tests.support.stack import Stack, StackFactory, direct_start, run_answer


def key_id(key: str) -> str:
    return key.split("_")[1]


async def receipts_of(stack: Stack, **where: Any) -> list[ReceiptRow]:
    async with stack.sessions() as s:
        rows = await s.execute(select(ReceiptRow).filter_by(tenant_id=stack.tenant_id, **where))
        return list(rows.scalars().all())


async def first_receipt(stack: Stack, **where: Any) -> ReceiptRow:
    for _ in range(300):
        rows = await receipts_of(stack, **where)
        if rows:
            return rows[0]
        await asyncio.sleep(0.1)
    raise AssertionError(f"no receipt {where}")


async def test_a_narrow_key_cannot_point_a_probe_with_the_tenants_token(
    make_stack: StackFactory, provider: FakeProvider
) -> None:
    """The reproduction: a key holding only ``execute:demo.echo`` asks for an
    ``http.request`` probe with the tenant's bearer connection to a URL of its choosing."""
    async with make_stack(
        http_allow_hosts=[provider.allow_entry], probe_min_interval_seconds=1
    ) as stack:
        url = provider.script("/collect", Step(200, {"ok": True}))
        token = f"tok-{uuid.uuid4().hex}"
        connection = await stack.add_connection(
            "http_bearer", token, config={"base_url": provider.base_url}
        )
        body = {
            "capability_id": "http.request",
            "input": {"method": "GET", "url": url},
            "connection_id": connection,
            "interval_seconds": 1,
        }

        async def add(key: str) -> Any:
            return await stack.http.post(f"{stack.url}/v1/probes", json=body, headers=bearer(key))

        narrow = await new_key(stack, ["execute:demo.echo"])
        refused = await add(narrow)
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "scope_missing"
        assert refused.json()["error"]["details"]["missing_scopes"] == ["probes:write"]
        # With the probe scope, still not the capability's.
        prober = await new_key(stack, ["execute:demo.echo", "probes:write"])
        refused = await add(prober)
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["details"]["missing_scopes"] == ["execute:http.request"]
        listed = await stack.http.get(f"{stack.url}/v1/probes", headers=bearer(stack.api_key))
        assert listed.json()["items"] == []
        await asyncio.sleep(1.5)
        assert provider.calls_to("/collect") == []

        # A key holding what executing it needs may; the probe runs with that key.
        lender = await new_key(stack, ["probes:write", "execute:http.request"])
        added = await add(lender)
        assert added.status_code == 201, added.text
        probe = added.json()
        assert probe["api_key_id"] == key_id(lender)
        ran = await first_receipt(stack, is_synthetic=True, status="success")
        assert ran.capability_id == "http.request"
        assert provider.calls_to("/collect")[0].headers["authorization"] == f"Bearer {token}"

        # Revoked: its runs stop acting for it (denied at policy, nothing sent).
        revoked = await stack.http.post(
            f"{stack.url}/v1/admin/keys/{key_id(lender)}/revoke", headers=ADMIN
        )
        assert revoked.status_code == 200, revoked.text
        denied = await first_receipt(stack, is_synthetic=True, error_code="key_revoked")
        assert denied.status == "policy_denied"
        async with stack.sessions() as s:
            decision = await s.get(PolicyDecisionRow, denied.policy_decision_id)
        assert decision is not None and decision.rule_hit == "KEY_REVOKED"
        sent = len(provider.calls_to("/collect"))
        await asyncio.sleep(2.5)
        assert len(provider.calls_to("/collect")) == sent
        assert len(await receipts_of(stack, error_code="key_revoked")) >= 2
        # A denied execution's run ends failed; the probe's own runs complete all the same.
        failed = f'MoatTenant = "{stack.tenant_id}" AND ExecutionStatus = "Failed"'
        assert (await stack.client.count_workflows(failed)).count >= 2
        probe_runs = [
            run.status
            async for run in stack.client.list_workflows(f'WorkflowType = "{PROBE_WORKFLOW}"')
            if run.id.startswith(f"{probe['schedule_id']}-run")
        ]
        assert WorkflowExecutionStatus.COMPLETED in probe_runs, probe_runs
        assert WorkflowExecutionStatus.FAILED not in probe_runs, probe_runs

        # Resuming needs a live key with the capability's scopes, which it then lends.
        path = f"{stack.url}/v1/probes/{probe['id']}"
        resumed = await stack.http.post(f"{path}/resume", headers=bearer(prober))
        assert resumed.status_code == 403, resumed.text
        assert (await stack.http.delete(path, headers=bearer(stack.api_key))).status_code == 204


async def _run_synthetic(
    stack: Stack, scopes: list[str] | None, api_key_id: str, *, wait: bool = True
) -> ExecuteResult | str:
    """A probe's run of ``demo.echo``, signed as the prober signs it, for a key."""
    spec = CapabilityCatalog().get("demo.echo")
    assert spec is not None
    key = f"probe:test-{uuid.uuid4().hex}"
    workflow_id = workflow_id_for(stack.tenant_id, key)
    request = direct_start(stack.tenant_id, key, spec, {"n": 1})
    ref = request.ref.model_copy(update={"is_synthetic": True})
    request = request.model_copy(update={"ref": ref, "scopes": scopes, "api_key_id": api_key_id})
    signed = StartKeyring.from_settings(stack.settings).signed(request, workflow_id)
    if not wait:
        await stack.client.start_workflow(
            EXECUTE_WORKFLOW, signed, id=workflow_id, task_queue=stack.settings.task_queue
        )
        return workflow_id
    result = await run_answer(
        stack.client.execute_workflow(
            EXECUTE_WORKFLOW,
            signed,
            id=workflow_id,
            task_queue=stack.settings.task_queue,
            result_type=ExecuteResult,
        )
    )
    return result


async def test_a_synthetic_run_is_held_to_its_keys_authority(stack: Stack) -> None:
    """At the policy step, with the real worker: a probe's run is checked against the scopes
    its start carries, needs a key's authority at all, and stops with a revoked key."""
    async with stack.sessions.begin() as s:
        await tenancy.set_tenant(s, stack.tenant_id)
        live, _ = await api_keys.issue_api_key(s, stack.tenant_id, scopes=["execute:*"])
        gone, _ = await api_keys.issue_api_key(s, stack.tenant_id, scopes=["execute:*"])
        await api_keys.revoke_api_key(s, gone.id, datetime.now(UTC))

    async def outcome(scopes: list[str] | None, key: str) -> tuple[str, str | None]:
        result = await _run_synthetic(stack, scopes, key)
        assert isinstance(result, ExecuteResult) and result.receipt is not None
        return result.receipt.status.value, result.receipt.error_code

    assert await outcome(["execute:*"], live.id) == ("success", None)
    assert await outcome(["execute:http.request"], live.id) == ("policy_denied", "scope_missing")
    assert await outcome(None, live.id) == ("policy_denied", "key_revoked")
    assert await outcome(["execute:*"], gone.id) == ("policy_denied", "key_revoked")

    # Approvals too: under a policy that wants a person for demo.echo, a probe's run waits.
    writer = await new_key(stack, ["policy:write"])
    await put_policy(
        stack,
        writer,
        {"mode": "strict", "rules": [{"capability": "demo.echo", "requires_approval": True}]},
    )
    workflow_id = await _run_synthetic(stack, ["execute:*"], live.id, wait=False)
    assert isinstance(workflow_id, str)
    for _ in range(300):
        async with stack.sessions() as s:
            row = (
                await s.execute(select(ApprovalRow).filter_by(workflow_id=workflow_id))
            ).scalar_one_or_none()
        if row is not None:
            break
        await asyncio.sleep(0.1)
    assert row is not None, "the probe's run did not ask for approval"
    assert (row.status, row.requested_by) == ("pending", f"key:{live.id}")
    await stack.client.get_workflow_handle(workflow_id).terminate("test over")
