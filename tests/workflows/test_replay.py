"""Ops replay runs with the real ``temporal workflow reset``: no side effect happens twice.

After a reset (first or last workflow task) of a finished run, the adapter is not called
again, the receipt is not duplicated, the budget does not move, and the reset run leaves a
manifest of its own marked ``replayed`` beside the original, which is never overwritten.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, update
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import Client

from schemas.capabilities import CapabilityCatalog
from schemas.ids import uuid7
from schemas.run import ExecuteResult, ExecuteWorkflowInput
from starter.devstack import temporal_binary
from starter.service.executions import replay as replay_module
from starter.service.executions.call import Unfinished
from starter.service.executions.front import Executions
from starter.service.executions.memory import AnswerCache
from store import budgets
from store.keyrings.signing import Keyring, verify_manifest
from store.keyrings.start import StartKeyring
from store.models import IdempotencyClaim, ManifestRow, ReceiptRow
from tests.support.fakes import FakeProvider, Step
from tests.support.stack import Stack, StackFactory, run_answer


def manifest_path(stack: Stack, tenant_id: str, run_id: str) -> Path:
    return stack.settings.manifests_dir / tenant_id / run_id / "manifest.json"


async def temporal_reset(stack: Stack, workflow_id: str, run_id: str, kind: str) -> None:
    """``temporal workflow reset`` of the run, as an operator types it."""
    target = stack.client.service_client.config.target_host
    proc = await asyncio.to_thread(
        subprocess.run,
        [
            str(temporal_binary()),
            "workflow",
            "reset",
            "--address",
            target,
            "--namespace",
            stack.settings.temporal_namespace,
            "--workflow-id",
            workflow_id,
            "--run-id",
            run_id,
            "--type",
            kind,
            "--reason",
            "ops replay test",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr


async def reset(stack: Stack, workflow_id: str, run_id: str, kind: str) -> str:
    """Reset through the CLI; returns the new run's id once that run has finished."""
    await temporal_reset(stack, workflow_id, run_id, kind)
    handle = stack.client.get_workflow_handle(workflow_id, result_type=ExecuteResult)
    for _ in range(100):
        description = await handle.describe()
        if description.run_id != run_id:
            break
        await asyncio.sleep(0.05)
    new_run = description.run_id
    assert new_run and new_run != run_id
    await run_answer(
        stack.client.get_workflow_handle(
            workflow_id, run_id=new_run, result_type=ExecuteResult
        ).result()
    )
    return new_run


async def counts(stack: Stack) -> tuple[int, int, int]:
    async with stack.sessions() as s:
        receipts = (
            await s.execute(
                select(func.count()).select_from(ReceiptRow).filter_by(tenant_id=stack.tenant_id)
            )
        ).scalar_one()
        manifests = (
            await s.execute(
                select(func.count()).select_from(ManifestRow).filter_by(tenant_id=stack.tenant_id)
            )
        ).scalar_one()
        budget = await budgets.budget_state(s, stack.tenant_id, "http.request", datetime.now(UTC))
    return receipts, manifests, budget.used if budget else -1


@pytest.fixture(params=[True, False], ids=["local-bookkeeping", "regular-bookkeeping"])
async def either_stack(
    request: pytest.FixtureRequest, make_stack: StackFactory, provider: FakeProvider
) -> AsyncIterator[Stack]:
    """Both modes of the bookkeeping steps: their histories differ, so resets do too."""
    allow = [provider.allow_entry]
    async with make_stack(http_allow_hosts=allow, local_activities=request.param) as s:
        yield s


@pytest.mark.parametrize("kind", ["FirstWorkflowTask", "LastWorkflowTask"])
async def test_reset_repeats_no_side_effect(
    either_stack: Stack, provider: FakeProvider, kind: str
) -> None:
    stack = either_stack
    url = provider.script(f"/reset-{kind}", Step(201, {"issue": 7}))
    async with stack.sessions.begin() as s:
        await budgets.set_budget(s, stack.tenant_id, "http.request", 10, "day")
    payload = {"method": "POST", "url": url, "json": {"title": "once"}}
    first = (await stack.execute("http.request", payload, key=f"reset-{kind}")).json()
    assert first["status"] == "executed"
    original = manifest_path(stack, stack.tenant_id, first["run_id"])
    original_bytes = original.read_bytes()
    before = await counts(stack)
    assert before == (1, 1, 1)

    new_run = await reset(stack, first["workflow_id"], first["run_id"], kind)

    assert len(provider.effects_on(f"/reset-{kind}")) == 1
    assert len(provider.calls_to(f"/reset-{kind}")) == 1  # the adapter never ran again
    assert await counts(stack) == (1, 2, 1)  # one receipt, budget unmoved, one more manifest
    assert original.read_bytes() == original_bytes  # never overwritten
    replayed = json.loads(manifest_path(stack, stack.tenant_id, new_run).read_bytes())
    assert replayed["replayed"] is True and replayed["tools"] == []
    assert replayed["run_id"] == new_run and replayed["correlation_id"] == first["receipt_id"]
    assert replayed["outputs"]["replayed_from"] == first["run_id"]
    assert replayed["metadata"]["replay_reason"] == "workflow_reset"
    # The record step signed and staged a manifest for the new run before it found the
    # receipt recorded: it was discarded, never published.
    assert not list(stack.settings.manifests_dir.rglob(".manifest.json.*"))
    ref = replayed["artifacts"][0]
    assert ref["location"] == str(original)
    assert ref["checksum"] == "sha256:" + hashlib.sha256(original_bytes).hexdigest()
    jwks = Keyring.load(stack.settings.signing_keyring_path).jwks()
    verify_manifest(replayed, jwks)
    verify_manifest(json.loads(original_bytes), jwks)
    # The answer to the caller is still the one receipt.
    again = await stack.execute("http.request", payload, key=f"reset-{kind}")
    assert again.json()["receipt"] == first["receipt"]


async def test_new_run_after_temporal_forgot_serves_the_stored_receipt(
    stack: Stack, provider: FakeProvider
) -> None:
    url = provider.script("/forgotten", Step(200))
    payload = {"method": "POST", "url": url, "json": {"n": 1}}
    first = (await stack.execute("http.request", payload, key="forgotten")).json()
    client: Client = stack.client
    await client.workflow_service.delete_workflow_execution(
        DeleteWorkflowExecutionRequest(
            namespace=stack.settings.temporal_namespace,
            workflow_execution=WorkflowExecution(
                workflow_id=first["workflow_id"], run_id=first["run_id"]
            ),
        )
    )
    # Temporal's record is gone; a start for the same key (as a racing gateway would make)
    # runs a new workflow, which must answer from the stored receipt.
    stored: dict[str, Any] = first["receipt"]
    capability = CapabilityCatalog().get("http.request")
    assert capability is not None
    arg = ExecuteWorkflowInput(
        receipt_id=str(uuid7()),
        tenant_id=stack.tenant_id,
        idempotency_key="forgotten",
        input_hash=stored["input_hash"],
        capability=capability,
        input=payload,
        request_id=str(uuid7()),
        trace_id="0" * 32,
        submitted_at=datetime.now(UTC),
    )
    # Signed as the gateway signs what it starts.
    arg = StartKeyring.from_settings(stack.settings).signed(arg, first["workflow_id"])
    result = await client.execute_workflow(
        "ExecuteCapability",
        arg,
        id=first["workflow_id"],
        task_queue=stack.settings.task_queue,
        result_type=ExecuteResult,
    )
    assert result.replayed and result.receipt is not None
    assert result.receipt.id == first["receipt_id"]
    assert len(provider.calls_to("/forgotten")) == 1
    async with stack.sessions() as s:
        rows = (
            (
                await s.execute(
                    select(ManifestRow).filter_by(
                        tenant_id=stack.tenant_id, receipt_id=first["receipt_id"]
                    )
                )
            )
            .scalars()
            .all()
        )
    assert sorted(r.replayed for r in rows) == [False, True]
    new = next(r for r in rows if r.replayed)
    manifest = json.loads(await asyncio.to_thread(Path(new.path).read_bytes))
    assert manifest["metadata"]["replay_reason"] == "idempotent_hit"
    assert manifest["tools"] == []


async def test_a_start_that_raced_the_runs_end_is_answered_from_the_receipt(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gateway read the key while its run was still going (no receipt yet: ``Unfinished``)
    and reaches Temporal only after that run completed, e.g. a start slowed down by load
    or by a Temporal restart. The completed run is not followed by a new one that answers
    from the receipt (a second, ``replayed`` manifest for nothing): the gateway answers from
    the receipt. A key whose claim has expired still gets a new execution."""
    payload = {"message": "race"}
    first = await stack.execute("demo.echo", payload, key="race")
    assert first.status_code == 200, first.text
    receipt_id = first.json()["receipt_id"]
    workflow_id = first.json()["workflow_id"]
    looked_up = Executions.replay
    stale: list[bool] = []

    async def stale_once(self: Executions, *args: Any) -> Any:
        if not stale:
            stale.append(True)
            return Unfinished(receipt_id)  # what the look-up saw before the receipt
        return await looked_up(self, *args)

    held_read = replay_module.authenticated_from_postgres

    async def held_stale_once(*args: Any) -> Any:
        # The same stale look-up on a held connection (a key verified moments ago): the
        # key's tenant is the one it was verified for (``known``).
        if not stale:
            stale.append(True)
            return Unfinished(receipt_id), args[5]
        return await held_read(*args)

    monkeypatch.setattr(Executions, "replay", stale_once)
    monkeypatch.setattr(replay_module, "authenticated_from_postgres", held_stale_once)
    again = await stack.execute("demo.echo", payload, key="race")
    assert stale
    assert again.status_code == 200, again.text
    assert again.headers.get("X-Moat-Idempotent-Replayed") == "true"
    assert again.json()["receipt"] == first.json()["receipt"]
    runs = [r async for r in stack.client.list_workflows(f"WorkflowId = '{workflow_id}'")]
    assert len(runs) == 1  # no second run
    async with stack.sessions() as s:
        manifests = (
            await s.execute(
                select(func.count())
                .select_from(ManifestRow)
                .filter_by(tenant_id=stack.tenant_id, receipt_id=receipt_id)
            )
        ).scalar_one()
    assert manifests == 1

    async with stack.sessions.begin() as s:
        await s.execute(
            update(IdempotencyClaim)
            .filter_by(tenant_id=stack.tenant_id, idempotency_key="race")
            .values(expires_at=datetime.now(UTC) - timedelta(seconds=1))
        )
    # The gateway keeps an answer in memory until the claim's expiry: past it, it asks
    # Postgres again. The test moved the expiry, not the clock, so it lets it go here.
    monkeypatch.setattr(AnswerCache, "get", lambda *_: None)
    fresh = await stack.execute("demo.echo", payload, key="race")
    assert fresh.status_code == 200, fresh.text
    assert fresh.json()["receipt_id"] != receipt_id
    assert fresh.headers.get("X-Moat-Idempotent-Replayed") is None
